"""TrainerPace: step times, deadlines and what holds the trainer, hand-computed."""

import pytest

from dora.sched.pace import TrainerPace


def _pace():
    p = TrainerPace(eta=2, batch=4)
    p.train_started(0.0)
    p.published(10.0)
    p.train_started(12.0)
    p.published(20.0)
    return p


def test_step_and_publication_interval_are_averaged():
    p = _pace()
    assert p.train_s == pytest.approx(9.0)  # (10 + 8) / 2
    assert p.last_step_s == pytest.approx(10.0) and p.pace_s == pytest.approx(10.0)


def test_deadline_counts_the_steps_left():
    p = _pace()
    # idle at version 2: steps 2, 3, 4 start before step 3 + η = 5 may begin
    assert p.deadline(3, 21.0, 2, False) == pytest.approx(21.0 + 3 * 9.0)
    # training step 3 (started at 12): it ends at 21, then 2 more steps
    assert p.deadline(3, 13.0, 2, True) == pytest.approx(21.0 + 2 * 9.0)
    assert p.deadline(0, 13.0, 5, False) == 13.0  # already due


def test_late_groups_mark_the_trainer_tail_bound():
    p = _pace()
    assert p.data_bound(3) and p.data_bound(5)  # 3 − 1 > 1: the first step has been observed
    assert not p.data_bound(2) and not p.data_bound(1)  # not yet
    p.tick(30.0, False, 3, 5)  # idle, short of data
    assert p.data_bound(5)
    p.tick(31.0, False, 4, 5)  # idle with a full batch: a late group holds it
    # held at 5: not data-bound at versions 5 and 6 (two versions, whatever η), again from 7
    assert p.blocked_at == 5 and not p.data_bound(5) and not p.data_bound(6) and p.data_bound(7)
    # data-paced deadlines take the publication interval when it is the longer
    p.pace_s = 15.0
    assert p.deadline(9, 40.0, 9, False, paced=True) == pytest.approx(40.0 + 2 * 15.0)
    assert p.deadline(9, 40.0, 9, False) == pytest.approx(40.0 + 2 * 9.0)
