"""Trajectory-length distribution of traces: CDF and, on log-log axes, the tail (1 - CDF)."""

from __future__ import annotations

import numpy as np

from dora.plots.style import subplots
from dora.trace import Trace, load_trace

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def length_cdf(traces, title: str | None = None):
    """Two panels: the response-length CDF (log x) and the complementary CDF (log-log). One trace:
    p50 / p90 / p99, the longest response and the truncation length are marked with lines, the
    tail beyond p99 shaded. Several traces: one colour each, p99 (dashed) and max (solid) marked.
    The legend gives each value and the share of truncated responses."""
    if isinstance(traces, (str, Trace)):
        traces = [traces]
    trs = [load_trace(t) if not isinstance(t, Trace) else t for t in traces]
    one = len(trs) == 1
    lo = 1.0
    fig, (a1, a2) = subplots(1, 2, figsize=(13.5, 5.0))
    for i, tr in enumerate(trs):
        c = _COLORS[i % len(_COLORS)]
        x = np.sort(tr.response_len.astype(np.int64))
        n = len(x)
        y = np.arange(1, n + 1) / n
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        trunc = tr.truncated()
        cap = tr.max_len
        name = tr.path.rsplit("/", 1)[-1]
        a1.step(x, y, where="post", color=c, label=f"{name}: {n:,} trajectories" if not one else f"{n:,} trajectories")
        u, cnt = np.unique(x, return_counts=True)
        ge = 1.0 - (np.cumsum(cnt) - cnt) / n  # share of trajectories at least this long
        a2.step(u, ge, where="post", color=c, label="share \u2265 length" if one else name)
        lo = min(lo, float(ge[-1]))
        if one:
            marks = [(p50, "p50", "#2ca02c", "--", 1.0), (p90, "p90", "#ff7f0e", "--", 1.0),
                     (p99, "p99", "#d62728", "--", 1.0), (cap, "truncation", "#9467bd", "-", 4.0),
                     (x[-1], "max", "black", ":", 1.2)]
        else:
            marks = [(p99, f"{name} p99", c, "--", 1.0), (x[-1], f"{name} max", c, ":", 1.5)]
        for ax in (a1, a2):
            for v, lab, col, ls, lw in marks:
                extra = f" ({trunc.mean():.2%} truncated)" if lab == "truncation" else ""
                ax.axvline(v, color=col, linestyle=ls, linewidth=lw, alpha=0.5 if lw > 2 else 1.0,
                           label=f"{lab} = {v:,.0f} tokens{extra}" if ax is a1 else None)
        if one:
            a2.axvspan(p99, max(cap, x[-1]) * 1.05, color="#d62728", alpha=0.08, label="tail beyond p99")
        else:
            a1.plot([], [], " ", label=f"{name}: {trunc.mean():.2%} truncated at {cap:,}")
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xlabel("response length (tokens, log scale)")
        ax.grid(alpha=0.3, which="both")
    a1.set_ylabel("fraction of trajectories \u2264 length")
    a1.set_ylim(0, 1.02)
    a2.set_yscale("log")
    a2.set_ylim(lo / 3, 1.5)
    a2.set_ylabel("fraction of trajectories \u2265 length (log scale)")
    a1.set_title("CDF", fontsize=10)
    a2.set_title("tail: complementary CDF", fontsize=10)
    a1.legend(fontsize=7.5, loc="upper left")
    a2.legend(fontsize=7.5, loc="lower left")
    if title is None:
        tr = trs[0]
        title = (f"Trajectory lengths of {tr.path} (G = {tr.group_size}, {tr.num_groups:,} groups)" if one else
                 "Trajectory lengths of " + ", ".join(t.path for t in trs))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
