"""The body contract's trajectory record and shared rows (dora.body)."""

from __future__ import annotations

from dora.body import Tracked, end_row, start_row, stop_row, train_rows
from dora.eventlog import SEGMENT_END, SEGMENT_START, EventLog
from dora.sim.instance import Seq


def test_a_record_follows_its_trajectory_across_segments():
    t = Tracked(7, 3, 1, instance=2, version=0, t_start=10.0)
    t.made, t.busy, t.prefill_s = 40, 0.5, 0.1
    t.restart(12.0, instance=5, version=1, before=t.tokens())  # moved, or resumed under a new version
    assert (t.instance, t.version, t.t_start, t.t_dispatch) == (5, 1, 12.0, 10.0)
    assert (t.before, t.made, t.busy, t.prefill_s) == (40, 0, 0.0, 0.0)
    t.made = 25
    assert t.tokens() == 65


def test_a_new_segment_record_continues_the_old_one():
    """The simulator makes a new Seq per segment after a move or a reload; it carries the
    trajectory's sample, dispatch time and tokens so far."""
    old = Seq(7, 3, 2, 0, remaining=100, ctx=50, prefill=50, t_start=10.0)
    old.sample_idx, old.made = 4, 30
    new = Seq(7, 3, 5, 0, remaining=70, ctx=80, prefill=0, t_start=12.0)
    new.follow(old)
    assert isinstance(new, Tracked)
    assert (new.sample_idx, new.t_dispatch, new.before, new.instance) == (4, 10.0, 30, 5)


def test_segment_rows_hold_the_segment():
    log = EventLog()
    t = Tracked(7, 3, 1, instance=2, version=1, t_start=10.0)
    start_row(log, 10.0, "dispatch", t, 120)
    t.made, t.busy, t.prefill_s = 40, 0.25, 0.125
    end_row(log, 14.0, "migrate_out", t, "to 5")
    stop_row(log, 15.0, "lost", 5, t, "instance failure")
    df = log.to_frame()
    start, end, lost = df.to_dict("records")
    assert start["event"] in SEGMENT_START and end["event"] in SEGMENT_END
    assert (start["instance"], start["trajectory"], start["prompt_id"], start["version"], start["tokens"]) == \
        (2, 7, 3, 1, 120)
    assert (end["tokens"], end["dur_s"], end["busy_s"], end["prefill_s"], end["detail"]) == (40, 4.0, 0.25, 0.125, "to 5")
    assert (lost["instance"], lost["tokens"], lost["dur_s"], lost["detail"]) == (5, 0, 0.0, "instance failure")


def test_train_rows_hold_response_tokens_then_the_step():
    log = EventLog()
    train_rows(log, 3.0, 2, [(7, 3, 1, 150, 100), (8, 3, 2, 130, 80)], 280)
    df = log.to_frame()
    assert df["event"].astype(str).tolist() == ["train", "train", "train_start"]
    assert df["tokens"].tolist() == [100, 80, 280]
    assert df["version"].tolist()[:2] == [1, 2] and set(df["trainer_version"]) == {2}
