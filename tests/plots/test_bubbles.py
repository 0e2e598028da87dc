"""dora.plots.bubbles: each policy's bars add up to 100% and carry its bubble ratio."""

from __future__ import annotations

import numpy as np

from dora.metrics import compute_metrics
from dora.plots import bubbles
from tests.event_logs import POLICIES
from tests.plots.common import legend_texts


def test_bubbles_bars_add_to_100(policy_logs):
    fig = bubbles(policy_logs)
    ax = fig.axes[0]
    conts = ax.containers
    assert len(conts) >= 3 and all(len(c) == len(POLICIES) for c in conts)
    heights = np.sum([[bar.get_height() for bar in c] for c in conts], axis=0)
    np.testing.assert_allclose(heights, 100.0, rtol=1e-9)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(POLICIES)
    assert "%" in ax.get_ylabel()
    assert any("useful" in t for t in legend_texts(ax))
    texts = [t.get_text() for t in ax.texts]
    for name in POLICIES:
        assert f"bubble {compute_metrics(policy_logs[name])['bubble_ratio']:.1%}" in texts
