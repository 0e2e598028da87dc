"""dora.plots.timeline: rows, versions and labels, the image's colours, bands of instances, a
window, and tool calls left empty."""

from __future__ import annotations

import numpy as np

from dora.analysis import event_names, segments
from dora.eventlog import EventLog
from dora.plots import save, timeline
from dora.plots.style import version_color
from tests.event_logs import hand_log
from tests.plots.common import PNG, legend_texts


def test_timeline_rows_versions_and_labels(policy_logs, tmp_path):
    df = policy_logs["dora"]
    fig = timeline(df)
    ax = fig.axes[0]
    n_inst = df.attrs["run"]["instances"]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "trainer" and len(labels) == 1 + n_inst
    assert "(s)" in ax.get_xlabel() and ax.get_ylabel() == "rollout instance"
    versions = sorted(set(segments(df)[0]["version"].tolist()))
    texts = legend_texts(ax)
    for v in versions:
        assert f"version {v}" in texts
    assert any(t.startswith("migration") for t in texts) or not (event_names(df) == "migrate_out").any()
    img = ax.images[0].get_array()
    assert img.shape[1] == 800 and img.shape[0] % n_inst == 0
    out = save(fig, tmp_path / "t.png")
    assert out.read_bytes()[:8] == PNG


def test_timeline_image_colours_by_version():
    fig = timeline(hand_log(), bins=20)
    ax = fig.axes[0]
    img = np.asarray(ax.images[0].get_array())
    sub = img.shape[0]
    # trajectory 0 (version 0) alone holds the instance during 0-2 s: 1 of 2 slots -> alpha 0.3 + 0.7 * 0.5
    a = 0.3 + 0.7 * 0.5
    want = 1 - a + a * np.array(version_color(0))
    np.testing.assert_allclose(img[sub // 2, 1], want, atol=1e-9)
    # 3-4 s: both slots held -> the full version colour
    np.testing.assert_allclose(img[sub // 2, 3], version_color(0), atol=1e-9)
    # 10-12 s: loading weights (grey over the whole row), 15-20 s: idle (white)
    grey = img[:, 11]
    assert np.allclose(grey, grey[0]) and not np.allclose(grey, 1.0)
    assert np.allclose(img[:, 19], 1.0)


def test_timeline_bands_many_instances():
    n = 300
    log = EventLog({"policy": "wide", "instances": n, "devices_per_instance": 1, "rollout_devices": n,
                    "trainer_devices": 1, "colocated": False, "max_seqs": 4, "body": "sim"})
    for i in range(n):
        log.add(0.0, "dispatch", i, i, i, i % 3, tokens=1)
        log.add(1.0 + i / n, "finish", i, i, i, i % 3, tokens=5, dur_s=1.0, busy_s=0.25)
    log.add(3.0, "run_end")
    fig = timeline(log.to_frame(), max_rows=128)
    ax = fig.axes[0]
    assert "bands of 3" in ax.get_ylabel()
    assert "100 bands of 3" in ax.get_title()
    assert ax.images[0].get_array().shape[0] % 100 == 0
    assert {"version 0", "version 1", "version 2"} <= set(legend_texts(ax))


def test_timeline_window(policy_logs):
    df = policy_logs["partial"]
    fig = timeline(df, window=(5.0, 50.0), bins=90)
    ax = fig.axes[0]
    assert ax.get_xlim() == (5.0, 50.0)
    assert "0.5 s" in ax.get_title()


def test_timeline_leaves_tool_calls_empty(agentic_logs, tmp_path):
    """A trajectory out of the batch in a tool call holds no slot on the timeline."""
    log = EventLog({"policy": "hand", "instances": 1, "devices_per_instance": 1, "rollout_devices": 1,
                    "trainer_devices": 1, "colocated": False, "max_seqs": 1, "body": "sim"})
    log.add(0.0, "dispatch", 0, 0, 0, 0, tokens=5)
    log.add(2.0, "tool_start", 0, 0, 0, 0, tokens=8, dur_s=4.0)
    log.add(6.0, "tool_end", 0, 0, 0, 0, tokens=3, dur_s=4.0)
    log.add(10.0, "finish", 0, 0, 0, 0, tokens=6, dur_s=10.0, busy_s=5.0)
    log.add(10.0, "run_end")
    df = log.to_frame()
    from dora.analysis import tool_calls

    tc = tool_calls(df)
    assert tc[["instance", "trajectory", "t0", "t1"]].values.tolist() == [[0, 0, 2.0, 6.0]]
    img = np.asarray(timeline(df, bins=10).axes[0].images[0].get_array())
    sub = img.shape[0]
    np.testing.assert_allclose(img[sub // 2, 1], version_color(0), atol=1e-9)  # decoding: the slot is full
    assert np.allclose(img[:, 3], 1.0) and np.allclose(img[:, 5], 1.0)  # in the tool call: empty
    assert save(timeline(agentic_logs["dora"]), tmp_path / "a.png").read_bytes()[:8] == PNG
