"""RemainderCalibration: how far cautious remainders ran short where it mattered, hand-computed."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dora.sched.calibration import RemainderCalibration

NOW = 100.0  # every settled bet below finishes at 50 (late for deadline 10, in time for 80)


def _settled(ratios, deadline=10.0, **kw):
    c = RemainderCalibration(**kw)
    for i, r in enumerate(ratios):
        c.bet(i, 100.0, 10.0, deadline)  # made 100 tokens, at most 10 more predicted, due by `deadline`
        c.settle(i, int(100 + 10 * r), 50.0)
    return c


def _none(t):
    return 0.0


def test_one_until_enough_bets_are_settled():
    assert _settled([5.0] * 9).factor(_none, NOW) == 1.0  # 9 < min_settled = 10
    assert _settled([5.0] * 10).factor(_none, NOW) == 1.5  # 5x short and late, widened by at most the cap


def test_factor_is_the_q_quantile_of_actual_over_predicted():
    # late bets with ratios 0.1, 0.2, ..., 2.0 (20): the 0.9-quantile is the 19th smallest (index 18), 1.9
    assert _settled([i / 10 for i in range(1, 21)], cap=10.0).factor(_none, NOW) == pytest.approx(1.9)
    assert _settled([i / 10 for i in range(1, 21)]).factor(_none, NOW) == 1.5  # the cap


def test_bets_that_finished_in_time_count_as_zero():
    # the same bets with a deadline of 80 (they finished at 50): running past the remainder cost nothing
    assert _settled([i / 10 for i in range(1, 21)], deadline=80.0, cap=10.0).factor(_none, NOW) == 1.0
    # 2 late bets 3x and 4x past among 18 in time: the 19th smallest of (0 x 18, 3, 4) is 3
    c = _settled([0.5] * 18, deadline=80.0, cap=10.0)
    for i, r in ((100, 3.0), (101, 4.0)):
        c.bet(i, 0.0, 10.0, 10.0)
        c.settle(i, int(10 * r), 50.0)
    assert c.factor(_none, NOW) == pytest.approx(3.0)


def test_calibrated_bets_leave_it_at_one():
    assert _settled([0.5] * 18 + [1.2, 3.0]).factor(_none, NOW) == pytest.approx(1.2)  # 19th smallest
    assert _settled([0.5] * 19 + [3.0]).factor(_none, NOW) == 1.0  # 0.5, never below 1


def test_open_bets_count_once_past_deadline_and_prediction():
    c = _settled([0.5] * 10, cap=10.0)
    c.bet(200, 0.0, 20.0, 10.0)  # 3x past, late: counts
    c.bet(201, 0.0, 20.0, 10.0)  # not past its prediction: left out
    c.bet(202, 0.0, 20.0, 10.0)  # 5x past, late: counts
    c.bet(203, 0.0, 20.0, 500.0)  # 9x past, but its deadline is still ahead: left out
    made = {200: 60.0, 201: 10.0, 202: 100.0, 203: 180.0}
    # ratios: ten 0.5, 3.0, 5.0 -> index int(0.9 * 12) = 10 of the sorted twelve: 3.0
    assert c.factor(made.__getitem__, NOW) == pytest.approx(3.0)
    assert c.factor(made.__getitem__, 5.0) == 1.0  # before every deadline: only the settled ones


def test_dropped_and_unknown_trajectories_leave_no_ratio():
    c = RemainderCalibration(min_settled=1)
    c.bet(1, 0.0, 10.0, 0.0)
    c.drop(1)
    c.settle(1, 1000, NOW)  # its bet is void
    c.settle(2, 1000, NOW)  # never bet on
    assert not c.ratios and c.factor(_none, NOW) == 1.0


def test_window_keeps_the_latest_bets():
    c = _settled([5.0] * 10 + [0.5] * 64)  # the ten short bets have left the 64-bet window
    assert c.factor(_none, NOW) == 1.0


@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e4), st.floats(0, 1e3), st.integers(0, 10**5)),
                max_size=100), st.floats(0, 1e3))
def test_factor_between_one_and_the_cap(bets, now):
    c = RemainderCalibration(min_settled=1)
    for i, (made, pred, dl, tokens) in enumerate(bets):
        c.bet(i, made, pred, dl)
        if i % 2:
            c.settle(i, tokens, now)
    assert 1.0 <= c.factor(lambda t: 2 * bets[t][0], now) <= c.cap
