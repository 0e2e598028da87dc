"""Response-length histogram of traces (`python -m dora.trace stats T --png out.png`)."""

from __future__ import annotations

import numpy as np

from dora.plots.style import subplots
from dora.trace.schema import Trace

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def length_histogram(traces: list[Trace], bins: int = 60):
    """Trajectories per length bin on log-spaced bins (log x). One trace: filled, p50/p90/p99/max
    marked; several: one outline each with its p99 dashed."""
    lens = [t.response_len.astype(np.int64) for t in traces]
    lo = max(1, int(min(x.min() for x in lens)))
    hi = int(max(x.max() for x in lens))
    edges = np.geomspace(lo, max(hi, lo + 1) * 1.0001, bins + 1)
    fig, ax = subplots(figsize=(8.5, 4.8))
    one = len(traces) == 1
    for i, (tr, x) in enumerate(zip(traces, lens)):
        c = _COLORS[i % len(_COLORS)]
        name = tr.path.rsplit("/", 1)[-1]
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        ax.hist(x, bins=edges, color=c, alpha=0.55 if one else 1.0, histtype="stepfilled" if one else "step",
                linewidth=1.5, label=f"{len(x):,} trajectories" if one else f"{name} ({len(x):,})")
        if one:
            for v, lab, col, ls in ((p50, "p50", "#2ca02c", "--"), (p90, "p90", "#ff7f0e", "--"),
                                    (p99, "p99", "#d62728", "--"), (x.max(), "max", "black", ":")):
                ax.axvline(v, color=col, linestyle=ls, linewidth=1.2, label=f"{lab} = {v:,.0f} tokens")
        else:
            ax.axvline(p99, color=c, linestyle="--", linewidth=1.0, label=f"{name} p99 = {p99:,.0f}")
    ax.set_xscale("log")
    ax.set_xlabel("response length (tokens, log-spaced bins)")
    ax.set_ylabel("trajectories per bin")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    if one:
        tr, x = traces[0], lens[0]
        p50, p99 = np.percentile(x, [50, 99])
        title = (f"{tr.path.rsplit('/', 1)[-1]}: {tr.num_groups:,} groups x G = {tr.group_size}, "
                 f"p99/p50 = {p99 / p50:.1f}")
    else:
        title = "response lengths"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
