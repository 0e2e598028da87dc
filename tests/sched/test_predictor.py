"""LengthPredictor's sorted window equals a fresh sort of the last `window` lengths at every resort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dora.sched.predictor import LengthPredictor


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(1, 5000), min_size=70, max_size=300),  # (the first 64 resort one by one)
       window=st.integers(1, 64), every=st.integers(1, 80))
def test_sorted_window_matches_recount(lengths, window, every):
    p = LengthPredictor(window=window, resort_every=every)
    seen: list[int] = []
    resorts = 0
    for k, n in enumerate(lengths):
        p.observe(k % 7, n, k % 3, 1.0)
        seen.append(n)
        if not p._new:  # a resort just ran
            resorts += 1
            want = np.sort(np.array(seen[-window:], dtype=float))
            assert np.array_equal(p._sorted, want)
            assert np.array_equal(p._suffix, np.append(np.cumsum(want[::-1])[::-1], 0.0))
            g = float(n)
            above = want[want > g]
            assert p.count_above(g) == len(above)
            if len(above):
                assert p.conditional_mean(g) == above.sum() / len(above)
    assert resorts >= 1


def test_group_mates_median_and_forget():
    p = LengthPredictor()
    for n in (30, 10, 20, 40):
        p.observe(5, n, 0, 2.0)
    assert p.mates_median(5) == 30.0  # the upper median of an even count
    assert p.predict_total(5, 35.0) == 36.0  # never below what is already generated
    p.forget(5)
    assert p.mates_median(5) is None


def test_count_above_is_strict_and_zero_when_empty():
    p = LengthPredictor()
    assert p.count_above(0.0) == 0
    for n in (10, 20, 20, 30):
        p.observe(0, n, 0, 1.0)
    assert [p.count_above(g) for g in (0.0, 10.0, 19.5, 20.0, 30.0)] == [4, 3, 3, 1, 0]
