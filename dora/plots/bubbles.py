"""Where the device-seconds go, per policy: stacked bars of dora.analysis.bubble_breakdown."""

from __future__ import annotations

import pandas as pd
from matplotlib.patches import Patch

from dora.analysis import BUBBLE_LABELS, BUBBLE_PARTS, bubble_breakdown, label_runs
from dora.plots.style import subplots

PART_STYLE = {  # part -> (colour, hatch)
    "useful": ("#2ca02c", ""),
    "empty_slots": ("#ffbb78", ""),
    "untrained_work": ("#d62728", ""),
    "weight_loading": ("#8c8c8c", "////"),
    "waiting_for_trainer": ("#1f77b4", ""),
    "idle": ("#d9d9d9", ""),
    "trainer_waiting": ("#9467bd", ""),
    "down": ("black", ""),
}


def bubble_table(logs) -> pd.DataFrame:
    """One row per run: the bubble parts as shares of all device-seconds, total and bubble_ratio."""
    out = []
    for name, df in label_runs(logs):
        b = bubble_breakdown(df)
        row = {"run": name, **{k: b[k] / b["total"] if b["total"] > 0 else 0.0 for k in BUBBLE_PARTS}}
        row["total_device_s"] = b["total"]
        row["bubble_ratio"] = b["bubble_ratio"]
        out.append(row)
    return pd.DataFrame(out)


def bubbles(logs, title: str | None = None):
    """Stacked bars, one per run: the share of all device-seconds (rollout and trainer) that is
    useful, empty decode slots, untrained work, weight loading, waiting, idle (see bubble_breakdown);
    the bubble ratio is written above each bar."""
    tab = bubble_table(logs)
    n = len(tab)
    fig, ax = subplots(figsize=(max(6.0, 1.6 * n + 4.5), 5.5))
    x = range(n)
    bottom = [0.0] * n
    present = [p for p in BUBBLE_PARTS if (tab[p] > 1e-9).any()]
    for p in present:
        color, hatch = PART_STYLE[p]
        vals = (100 * tab[p]).tolist()
        ax.bar(x, vals, bottom=bottom, color=color, hatch=hatch, edgecolor="white" if not hatch else "0.3",
               linewidth=0.5, width=0.6, label=BUBBLE_LABELS[p])
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in tab.iterrows():
        ax.text(i, 101, f"bubble {r['bubble_ratio']:.1%}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(x))
    ax.set_xticklabels(tab["run"].tolist())
    ax.set_ylim(0, 110)
    ax.set_ylabel("share of all device-seconds (%)")
    ax.set_xlabel("policy")
    runs = [d.attrs.get("run", {}) for _, d in label_runs(logs)]
    trace = {str(r.get("trace", "")) for r in runs} - {""}
    head = title or ("Bubble ratio by policy" + (f" on {trace.pop()}" if len(trace) == 1 else ""))
    ax.set_title(head + "\nbubble ratio = 1 - useful / (rollout + trainer devices x run length), as in "
                 "dora.metrics", fontsize=10)
    handles = [Patch(facecolor=PART_STYLE[p][0], hatch=PART_STYLE[p][1], edgecolor="0.3", label=BUBBLE_LABELS[p])
               for p in reversed(present)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return fig
