"""Throughput and scaling efficiency against the number of rollout instances, one line per policy.

Reads a tidy sweep table (`python -m dora.sim sweep --grid cluster.instances=...`): the instance
column, `policy`, `e2e_samples_per_s` and, if present, `scaling_efficiency` (throughput per
instance over the same at the smallest instance count; computed here when missing) and
`bound_samples_per_s` (drawn dashed).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dora.errors import InputError
from dora.plots.style import policy_color, policy_order, subplots
from dora.plots.sweep import read_sweep


def scaling_efficiency(tab: pd.DataFrame, x: str) -> pd.Series:
    """(e2e_samples_per_s / x) over the same at each policy's smallest x (mean over repeats)."""
    per = tab["e2e_samples_per_s"] / tab[x]
    smallest = tab.groupby("policy")[x].transform("min")
    ref = per.where(tab[x] == smallest).groupby(tab["policy"]).transform("mean")
    return per / ref


def scaling_plot(table, x: str = "cluster.instances", title: str | None = None):
    """Two panels against instances (log2 axis): e2e throughput, and scaling efficiency (1 = linear)."""
    tab = table if isinstance(table, pd.DataFrame) else read_sweep(table)
    for c in ("policy", "e2e_samples_per_s", x):
        if c not in tab.columns:
            raise InputError(f"scaling table: column '{c}' missing; sweep cluster.instances with "
                             "python -m dora.sim sweep --grid cluster.instances=64,256,...")
    tab = tab.copy()
    if "scaling_efficiency" not in tab.columns or tab["scaling_efficiency"].isna().all():
        tab["scaling_efficiency"] = scaling_efficiency(tab, x)
    fig, (ax, ax2) = subplots(1, 2, figsize=(12, 4.8))
    pols = sorted(tab["policy"].astype(str).unique(),
                  key=lambda p: (policy_order().index(p) if p in policy_order() else 99, p))
    for i, p in enumerate(pols):
        g = tab[tab["policy"].astype(str) == p].groupby(x)[["e2e_samples_per_s", "scaling_efficiency"]].mean()
        c = policy_color(p, i)
        ax.plot(g.index, g["e2e_samples_per_s"], marker="o", color=c, label=p)
        ax2.plot(g.index, g["scaling_efficiency"], marker="o", color=c, label=p)
    if "bound_samples_per_s" in tab.columns:
        b = tab.groupby(x)["bound_samples_per_s"].mean()
        ax.plot(b.index, b.values, color="black", linestyle="--", linewidth=1, label="bubble-free bound")
    ax2.axhline(1.0, color="black", linestyle=":", linewidth=1, label="linear")
    vals = np.unique(pd.to_numeric(tab[x], errors="coerce").dropna())
    for a in (ax, ax2):
        if len(vals) > 1 and (vals > 0).all():
            a.set_xscale("log", base=2)
            a.set_xticks(vals)
            a.set_xticklabels([f"{v:g}" for v in vals])
            a.minorticks_off()
        a.set_xlabel("rollout instances (log scale)")
        a.grid(alpha=0.3)
    ax2.set_ylim(bottom=0)
    if len(vals) > 1 and (tab["e2e_samples_per_s"] > 0).all():
        ax.set_yscale("log")  # throughput grows with the cluster: equal ratios, equal distances
    else:
        ax.set_ylim(bottom=0)
    ax.set_ylabel("end-to-end throughput (trained samples/s, log scale)")
    ax2.set_ylabel("scaling efficiency (throughput per instance / at smallest)")
    ax.legend(fontsize=8, frameon=False, title="policy", title_fontsize=8)
    ax2.legend(fontsize=8, frameon=False)
    ax.set_title("Throughput against instances", fontsize=10)
    ax2.set_title("Scaling efficiency (1 = linear)", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
