"""dora.plots.staleness_plot: the staleness histogram per policy."""

from __future__ import annotations

import pytest

from dora.plots import staleness_hist
from tests.event_logs import POLICIES
from tests.plots.common import legend_texts


def test_staleness_hist(policy_logs):
    fig = staleness_hist(policy_logs)
    ax = fig.axes[0]
    conts = ax.containers
    assert len(conts) == len(POLICIES)
    for name, c in zip(POLICIES, conts):
        assert sum(b.get_height() for b in c) == pytest.approx(100.0)
    sync_bars = {round(b.get_x() + b.get_width() / 2): b.get_height() for b in conts[0]}
    assert max(sync_bars, key=sync_bars.get) <= 1  # sync trains fresh data
    assert any("\u03b7 = 2" in t for t in legend_texts(ax))
    assert "staleness" in ax.get_xlabel() and "%" in ax.get_ylabel()
