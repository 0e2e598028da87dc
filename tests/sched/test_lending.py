"""Lending: the decision to lend rollout instances to the trainer, hand-computed."""

import itertools

import pytest

from dora.sched.costs import DecodeCost, TrainCost
from dora.sched.lending import Lending
from dora.sched.pace import TrainerPace

# a decode step: 0.01 s whatever the batch; a trainer step on 1,000 tokens over d devices:
# 2 + 10/d s, then 1 s to publish: 4.0 s on 10 devices, 3.8333 on 12, 3.7143 on 14
DECODE = DecodeCost(base_s=0.01, expert_s=0.0, per_seq_s=0.0, per_ctx_s=0.0, prefill_per_token_s=0.0)


def _lending(resize: float = 0.5) -> Lending:
    lend = Lending(DECODE, TrainCost(base_s=2.0, device_s_per_token=0.01, publish_s=1.0, resize_s=resize), 10,
                   TrainerPace(4, 1))
    lend.finished(100, 10)
    return lend


_VERSIONS = itertools.count(10)  # trainer versions of the steps the tests start


def _step(lend: Lending, t: float, slack: float | None = 100.0) -> None:
    """A step starts at `t`; the last group of the version it takes last (its version - 4)
    completed `slack` seconds before (None: no group of that version)."""
    v = next(_VERSIONS)
    lend.pace.train_started(t)
    if slack is not None:
        lend.group_done(v - 4, t - slack)
    lend.step_started(1000.0, v)


def _calm(lend: Lending, steps: int = 3, t: float = 0.0, slack: float | None = 100.0) -> float:
    """`steps` steps of 4 s back to back (no wait); returns the time after the last publication."""
    for _ in range(steps):
        _step(lend, t, slack)
        t += 4.0
        lend.pace.published(t)
    return t


def test_rate_of_an_instance_with_full_slots():
    """10 slots, 100 tokens a trajectory at 0.01 s a step: 10 trajectories a second (f = 1), 5 at f = 2;
    a KV cache of 300 tokens holds 5 contexts of 10 + 100/2."""
    lend = _lending()
    assert lend.rate(10, 10**9, 1.0, 100.0) == pytest.approx(10.0)
    assert lend.rate(10, 10**9, 2.0, 100.0) == pytest.approx(5.0)
    assert lend.rate(10, 300, 1.0, 100.0) == pytest.approx(5.0)


def test_length_stats_mean_over_the_90th_percentile():
    lend = _lending()
    lend.lengths = [100 * k for k in range(1, 11)]  # mean 550, 90th percentile (index 8) 900
    assert lend.length_stats() == pytest.approx((550.0, 550 / 900))


def test_lends_the_slowest_drained_instances_the_rest_keeps_up_with():
    """Four instances of 2 devices at 10, 10, 5 and 8 trajectories a second, half of it counted
    on (16.5); a step trains 40 trajectories. Lending the slowest (5) leaves 14 a second against
    40 / 3.8333 = 10.4 needed; lending the next (8) too would leave 10 against 40 / 3.7143 = 10.8:
    one. It saves 4.0 - 3.8333 s a step, 1.33 s over 8 steps, more than two resizes of 0.5 s."""
    lend = _lending()
    _calm(lend)
    serving = [(0, 2, 10.0, True, 10), (1, 2, 10.0, True, 10), (2, 2, 5.0, True, 10), (3, 2, 8.0, True, 10)]
    assert lend.plan(40, 4, serving, 0.5) == ([2], False)
    assert _lending(resize=0.7).plan(40, 4, serving, 0.5) == ([], False)  # (not calm yet)
    slow = _lending(resize=0.7)
    _calm(slow)
    assert slow.plan(40, 4, serving, 0.5) == ([], False)  # 1.33 s saved < 2 x 0.7 s of resizes
    busy = [(i, d, r, i != 2, n) for i, d, r, _, n in serving]  # the slowest is not drained: the next one
    assert lend.plan(40, 4, busy, 0.5) == ([3], False)


def test_no_lending_before_two_calm_steps():
    lend = _lending()
    serving = [(0, 2, 10.0, True, 10), (1, 2, 10.0, True, 10), (2, 2, 5.0, True, 10), (3, 2, 8.0, True, 10)]
    _calm(lend, steps=2)  # the first step's wait is not counted: one calm step
    assert lend.calm == 1 and lend.plan(40, 4, serving, 0.5) == ([], False)
    _calm(lend, steps=1, t=8.0)
    assert lend.calm == 2 and lend.plan(40, 4, serving, 0.5) == ([2], False)


def test_a_wait_takes_the_lent_instances_back_then_a_cooldown():
    lend = _lending()
    t = _calm(lend)
    lend.lent[2] = 2
    assert lend.devices() == 12
    _step(lend, t + 1.0)  # waited 1 s after a 4 s step: more than 5% of it
    assert lend.calm == 0
    serving = [(0, 2, 10.0, True, 10), (1, 2, 10.0, True, 10), (3, 2, 8.0, True, 10)]
    assert lend.plan(40, 4, serving, 0.5) == ([], True)
    lend.lent.clear()
    lend.pace.published(t + 5.0)
    t = _calm(lend, steps=3, t=t + 5.0)  # 3 calm steps; the cooldown of 4 is not over
    assert lend.plan(40, 4, serving + [(2, 2, 5.0, True, 10)], 0.5) == ([], False)
    _calm(lend, steps=1, t=t)
    assert lend.plan(40, 4, serving + [(2, 2, 5.0, True, 10)], 0.5) == ([2], False)


def test_keeps_them_while_the_trainer_does_not_wait_whatever_the_estimate():
    """Lent, no wait: the instances left, whatever their estimated rate, stay as they are."""
    lend = _lending()
    _calm(lend)
    lend.lent[2] = 2
    assert lend.plan(40, 4, [(0, 2, 0.5, True, 10), (1, 2, 0.5, True, 10)], 0.5) == ([], False)


def test_a_trainer_waiting_for_data_ends_the_calm_and_starts_a_cooldown():
    lend = _lending()
    _calm(lend)
    lend.waiting()
    assert lend.calm == 0 and lend.cooldown == 0  # nothing lent: no cooldown
    _calm(lend, t=20.0)
    lend.lent[2] = 2
    lend.waiting()
    assert lend.calm == 0 and lend.cooldown == 4


def test_the_instances_left_keep_a_group_of_slots():
    """Lending the slowest would leave 30 of the 40 slots: enough for a group of 30, not of 31."""
    lend = _lending()
    _calm(lend)
    serving = [(0, 2, 10.0, True, 10), (1, 2, 10.0, True, 10), (2, 2, 5.0, True, 10), (3, 2, 8.0, True, 10)]
    assert lend.plan(40, 31, serving, 0.5) == ([], False)
    assert lend.plan(40, 30, serving, 0.5) == ([2], False)


def test_the_deadline_slack_is_how_long_before_the_step_its_last_group_completed():
    """η = 4: the step training version 14 takes version 10's groups last; the last of them
    completed at 12 s, the step starts at 20 s: 8 s of slack. Older versions are dropped."""
    lend = _lending()
    lend.group_done(9, 1.0)
    lend.group_done(10, 10.0)
    lend.group_done(10, 12.0)
    lend.group_done(11, 15.0)
    lend.pace.train_started(20.0)
    lend.step_started(1000.0, 14)
    assert lend.slacks == [8.0] and list(lend.done_at) == [11]
    lend.pace.train_started(14.0)
    lend.step_started(1000.0, 15)  # (a group completing after its step started: no slack below 0)
    assert lend.slacks == [8.0, 0.0]


def test_no_lending_before_a_step_met_a_deadline():
    lend = _lending()
    _calm(lend, slack=None)
    serving = [(0, 2, 10.0, True, 10), (1, 2, 10.0, True, 10), (2, 2, 5.0, True, 10), (3, 2, 8.0, True, 10)]
    assert lend.calm == 2 and lend.plan(40, 4, serving, 0.5) == ([], False)


def test_the_slack_bounds_how_much_shorter_the_steps_may_get():
    """A step trains 10 trajectories: capacity allows lending three instances (the slowest first,
    until the slots left would not hold a group of 4), 4.0 -> 3.625 s a step (16 devices). With
    0.8 s of slack over η = 4 a step may shrink by 0.2 s, to 3.8 s: lending stops at the instance
    that reaches it (14 devices, 3.7143 s), and saves 0.2 s a step, 1.6 s over 8 steps, more than
    the two resizes (1 s). With 0.4 s of slack (down to 3.9 s) one instance reaches it, and 0.8 s
    saved is less than the resizes: none."""
    serving = [(0, 2, 10.0, True, 10), (1, 2, 10.0, True, 10), (2, 2, 5.0, True, 10), (3, 2, 8.0, True, 10)]
    free = _lending()
    _calm(free)
    assert free.plan(10, 4, serving, 0.5) == ([2, 3, 0], False)
    tight = _lending()
    _calm(tight, slack=0.8)
    assert tight.plan(10, 4, serving, 0.5) == ([2, 3], False)
    tighter = _lending()
    _calm(tighter, slack=0.4)
    assert tighter.plan(10, 4, serving, 0.5) == ([], False)
