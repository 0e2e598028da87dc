"""dora.plots.lengths: the length CDF of a trace."""

from __future__ import annotations

import numpy as np
import pytest

from dora.plots import length_cdf
from dora.trace import load_trace
from tests.plots.common import legend_texts


def test_length_cdf(small_trace_path):
    tr = load_trace(small_trace_path)
    fig = length_cdf(tr)
    a1, a2 = fig.axes
    texts = legend_texts(a1)
    p99 = np.percentile(tr.response_len, 99)
    assert f"p99 = {p99:,.0f} tokens" in texts
    assert any(t.startswith("truncation") for t in texts)
    assert a2.get_yscale() == "log" and "tokens" in a1.get_xlabel()
    x, y = a1.lines[0].get_data()
    assert y[-1] == pytest.approx(1.0) and len(x) == len(tr)
