"""Staleness histogram per policy: trainer version at consumption minus generating version."""

from __future__ import annotations

import numpy as np

from dora.analysis import check_log, label_runs, staleness
from dora.plots.style import policy_color, subplots


def staleness_hist(logs, title: str | None = None):
    """Grouped bars: for each staleness value, the share of each run's trained trajectories
    (generating version as in dora.metrics); the staleness bound η is a dashed line."""
    runs = label_runs(logs)
    data = []
    for name, df in runs:
        check_log(df)
        data.append((name, staleness(df), df.attrs.get("run", {})))
    hi = max([int(s.max()) for _, s, _ in data if len(s)] + [0])
    lo = min([int(s.min()) for _, s, _ in data if len(s)] + [0])
    xs = np.arange(lo, hi + 1)
    n = len(data)
    w = 0.8 / max(n, 1)
    fig, ax = subplots(figsize=(max(6.5, 0.9 * len(xs) + 4.5), 4.5))
    for i, (name, s, run) in enumerate(data):
        counts = np.array([(s == v).sum() for v in xs], float)
        share = 100 * counts / max(len(s), 1)
        policy = str(run.get("policy", name))
        ax.bar(xs - 0.4 + w * (i + 0.5), share, width=w, color=policy_color(policy, i), edgecolor="white",
               linewidth=0.5, label=f"{name.splitlines()[0]} (n={len(s):,}, mean {s.mean() if len(s) else 0:.2f})")
    etas = {r.get("eta") for _, _, r in data} - {None}
    if len(etas) == 1:
        eta = etas.pop()
        ax.axvline(eta + 0.5, color="black", linestyle="--", linewidth=1, label=f"staleness bound \u03b7 = {eta}")
    ax.set_xticks(xs)
    ax.set_xlabel("staleness (trainer version at training \u2212 generating version, versions)")
    ax.set_ylabel("share of trained trajectories (%)")
    ax.set_title(title or "Staleness of trained trajectories by policy", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return fig
