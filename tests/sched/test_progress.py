"""Progress: the per-instance step clock, hand-computed."""

import math

import pytest

from dora.sched.costs import DecodeCost
from dora.sched.progress import Progress

# one step: 1 s plus 0.5 s per sequence, context free
COST = DecodeCost(base_s=1.0, expert_s=0.0, per_seq_s=0.5, per_ctx_s=0.0)


def _prog():
    p = Progress(COST)
    p.add_instance(0)
    p.add_instance(1)
    return p


def test_clock_follows_the_batch():
    p = _prog()
    p.join(0, 0, 10, 0.0, 0.0)
    assert p.generated(0, 3.0) == pytest.approx(2.0)  # alone: 1.5 s a step
    p.join(1, 0, 10, 0.0, 3.0)
    assert p.generated(0, 7.0) == pytest.approx(4.0)  # two: 2 s a step
    assert p.generated(1, 7.0) == pytest.approx(2.0)
    assert p.context(0, 7.0) == pytest.approx(26.0)  # 2 prompts of 10 + 4 + 2 made
    p.move(1, 1, 7.0)  # carries its 2 tokens
    assert p.generated(1, 10.0) == pytest.approx(4.0)
    assert p.generated(0, 10.0) == pytest.approx(6.0)
    assert p.time_left(0, 4, 10.0) == pytest.approx(6.0)  # 4 steps alone
    assert p.time_left(0, 4, 10.0, iid=1, dn=1) == pytest.approx(8.0)  # next to trajectory 1


def test_pause_stops_the_clock():
    p = _prog()
    p.join(0, 0, 10, 0.0, 0.0)
    p.pause(0, 3.0)
    assert p.generated(0, 9.0) == pytest.approx(2.0)
    p.resume(0, 9.0)
    assert p.generated(0, 10.5) == pytest.approx(3.0)


def test_leave_returns_tokens_and_finish_learns_the_speed():
    p = _prog()
    p.join(0, 0, 10, 0.0, 0.0)
    assert p.leave(0, 6.0) == pytest.approx(4.0)
    assert p.n[0] == 0 and p.generated(0, 9.0) == 0.0
    p.join(1, 1, 10, 0.0, 0.0)
    p.finish(1, 100, 300.0)  # the clock counted 200 steps, it made 100: twice as slow as modelled
    assert p.f[1] == pytest.approx(math.exp(0.3 * (100 / 256) * math.log(2.0)))  # LEARN 0.3 × 100/256
    assert p.speed[1] == pytest.approx(p.f[1])  # alone, both learn the same
    assert p.f[0] == 1.0


def test_finishes_together_move_speed_towards_what_they_saw_and_f_by_it_each():
    """Eight trajectories on one instance from t = 0 (a step: 1 + 8·0.5 = 5 s), all finishing at
    300 s with 30 tokens: the clock counted 60 steps for each, twice what they made. Each finish
    moves log f by w·log 2, w = 0.3·30/256: eight together move it by 8·w·log 2 (compounded).
    Each sees a factor of 2 (300 s over the 150 modelled seconds their 30 steps take at f = 1), and
    moves log speed a share w of the way to log 2: after eight, (1 - (1 - w)^8)·log 2, less than f moved."""
    p = _prog()
    for t in range(8):
        p.join(t, 0, 10, 0.0, 0.0)
    for t in range(8):
        p.finish(t, 30, 300.0)
    w = 0.3 * 30 / 256
    assert p.f[0] == pytest.approx(math.exp(8 * w * math.log(2.0)))
    assert p.speed[0] == pytest.approx(math.exp((1 - (1 - w) ** 8) * math.log(2.0)))
    assert p.speed[0] < p.f[0]


def test_f_stays_within_f_max_of_speed():
    """Sixty-four trajectories on one instance from t = 0 finish together at 60 steps of 33 s
    (1 + 64·0.5) with 30 tokens, each having counted twice its steps: each finish moves log f by
    w·log 2 (w = 0.3·30/256), 64 of them to e^1.56 = 4.76, and log speed a share w of the way to
    log 2, to 1.81; 4.76 is within F_MAX = 4 of 1.81. An instance whose f such bursts left at 64
    while its speed is 1: a trajectory alone there for 100 steps of 1.5·64 s makes its 100 tokens
    (f was right, ratio 1), speed moves towards the 64 it saw by at most a factor 2 per finish
    (to 2^w, w = 0.3·100/256), and f comes down to 4·2^w."""
    p = _prog()
    for t in range(64):
        p.join(t, 0, 10, 0.0, 0.0)
    for t in range(64):
        p.finish(t, 30, 60 * 33.0)
    w = 0.3 * 30 / 256
    assert p.speed[0] == pytest.approx(math.exp((1 - (1 - w) ** 64) * math.log(2.0)))
    assert p.f[0] == pytest.approx(math.exp(64 * w * math.log(2.0)))
    p.f[1] = 64.0
    p.join(100, 1, 10, 0.0, 0.0)
    p.finish(100, 100, 100 * 1.5 * 64)
    w = 0.3 * 100 / 256
    assert p.speed[1] == pytest.approx(2.0 ** w)
    assert p.f[1] == pytest.approx(p.F_MAX * 2.0 ** w)


def test_most_made_is_the_max_over_generated():
    p = _prog()
    p.join(0, 0, 10, 0.0, 0.0)
    p.join(1, 0, 10, 0.0, 3.0)  # joins 2 steps later (alone: 1.5 s a step)
    p.join(2, 0, 10, 2.0, 3.0)  # migrated in with 2 tokens: level with trajectory 0
    p.join(3, 1, 10, 50.0, 0.0)  # on another instance
    # from 3 s three run at 2.5 s a step: at 8 s, 2 steps more: 0 and 2 have made 4, 1 has made 2
    assert p.generated(0, 8.0) == p.generated(2, 8.0) == 4.0
    assert p.generated(1, 8.0) == 2.0
    assert p.most_made({2: None, 0: None, 1: None}, 8.0) == 0  # a tie goes to the lowest id
    assert p.most_made({2: None, 1: None}, 8.0) == 2
    assert p.most_made({1: None, 3: None}, 8.0) == 3  # 50 carried in
    p.leave(3, 8.0)
    assert p.most_made({3: None}, 9.0) == 3  # not running: 0 made, still the only one
    assert p.most_made({}, 8.0) == -1
    for now in (3.5, 7.0, 11.25):
        trajs = [2, 0, 1]
        assert p.most_made(trajs, now) == max(trajs, key=lambda t: (p.generated(t, now), -t))


def test_a_tool_call_stops_the_count_where_it_waits():
    p = _prog()
    p.join(0, 0, 10, 0.0, 0.0)
    p.join(1, 0, 10, 0.0, 0.0)  # two: 2 s a step
    p.tool_call(0, 4.0)  # after 2 steps
    assert p.n[0] == 1 and p.where(0) == 0
    assert p.generated(0, 7.0) == pytest.approx(2.0)  # no steps while it waits
    assert p.generated(1, 7.0) == pytest.approx(4.0)  # alone from t=4: 1.5 s a step
    assert p.context(0, 7.0) == pytest.approx(14.0)  # only trajectory 1's 10 + 4 decode
    assert p.kv_held(0, 7.0) == pytest.approx(26.0)  # ... while trajectory 0's 10 + 2 stay pinned
    assert p.time_left(0, 3, 7.0) == pytest.approx(4.5)  # where it waits, with the batch as it is
    assert p.most_made([0, 1], 7.0) == 1
    p.tool_back(0, 5, 7.0)  # 5 tokens of tool output join its context
    assert p.where(0) == 0 and p.context(0, 7.0) == pytest.approx(31.0)  # 14 + 10 + 5 + 2
    assert p.kv_held(0, 7.0) == pytest.approx(31.0)
    assert p.generated(0, 9.0) == pytest.approx(3.0)  # two again: one step in 2 s


def test_a_trajectory_moved_or_ended_during_its_tool_call():
    p = _prog()
    p.join(0, 0, 10, 0.0, 0.0)
    p.tool_call(0, 3.0)  # after 2 steps alone
    p.move(0, 1, 4.0)  # it waits at the destination
    assert p.where(0) == 1 and p.n[0] == 0 and p.n[1] == 0 and p.generated(0, 4.0) == pytest.approx(2.0)
    assert p.kv_held(0, 4.0) == 0.0 and p.kv_held(1, 4.0) == pytest.approx(12.0)  # its KV went along
    p.tool_back(0, 0, 5.0)
    assert p.generated(0, 6.5) == pytest.approx(3.0)  # one step on instance 1
    p.tool_call(0, 6.5)
    assert p.leave(0, 8.0) == pytest.approx(3.0)  # aborted or lost in its call: what it had made
    assert p.where(0) == -1 and p.generated(0, 9.0) == 0.0 and p.kv_held(1, 9.0) == 0.0
    p.tool_back(0, 7, 9.0)  # a call ending after that changes nothing
    assert p.where(0) == -1 and p.n[1] == 0
