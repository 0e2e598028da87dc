"""Where the decode slots go, per run: rollout instance-time by state (dora.slot_use), one
horizontal stacked bar per run, each state's mean slot occupancy written on its segment, and at
the right the run's slot occupancy and how full it kept the staleness bound's pipeline."""

from __future__ import annotations

import pandas as pd
from matplotlib.patches import Patch

from dora.analysis import label_runs
from dora.plots.style import subplots
from dora.slot_use import STATES, in_flight, slot_use

STATE_STYLE = {  # state -> (colour, label)
    "newest": ("#2ca02c", "holding the newest version"),
    "older": ("#ffbb78", "draining an older version"),
    "loading": ("#8c8c8c", "loading weights"),
    "empty": ("#d9d9d9", "holding nothing"),
    "down": ("black", "failed"),
}


def slot_table(logs) -> pd.DataFrame:
    """One row per run: each state's share of rollout instance-time and its occupancy, the run's
    overall occupancy, and its groups in flight (mean, and share of the (η + 1)·B cap)."""
    rows = []
    for name, df in label_runs(logs):
        s = slot_use(df)
        row = {"run": name}
        for st in STATES:
            row[f"{st}_share"] = s.loc[st, "share"]
            row[f"{st}_occupancy"] = s.loc[st, "occupancy"]
        row["occupancy"] = s.loc["all", "occupancy"]
        f = in_flight(df)
        row["in_flight_groups"], row["in_flight_share"] = f["groups"], f["share"]
        rows.append(row)
    return pd.DataFrame(rows)


def slots(logs, title: str | None = None):
    """Horizontal stacked bars, one per run: the share of rollout instance-time in each state, the
    state's mean occupancy (held trajectories / decode slots) on its segment, the run's at the right."""
    tab = slot_table(logs)
    n = len(tab)
    fig, ax = subplots(figsize=(10.0, 1.6 + 0.5 * n))
    y = list(range(n))[::-1]
    left = [0.0] * n
    present = [s for s in STATES if (tab[f"{s}_share"] > 1e-9).any()]
    for s in present:
        color, label = STATE_STYLE[s]
        w = (100 * tab[f"{s}_share"]).tolist()
        ax.barh(y, w, left=left, color=color, edgecolor="white", linewidth=0.5, height=0.6, label=label)
        for yi, li, wi, occ in zip(y, left, w, tab[f"{s}_occupancy"]):
            if wi >= 7 and s in ("newest", "older"):
                ax.text(li + wi / 2, yi, f"{occ:.0%} full", ha="center", va="center", fontsize=8)
        left = [a + b for a, b in zip(left, w)]
    for yi, occ, fl in zip(y, tab["occupancy"], tab["in_flight_share"]):
        ax.text(101, yi, f"{occ:.0%}  {fl:.0%}", ha="left", va="center", fontsize=9)
    ax.set_yticks(y)
    ax.set_yticklabels(tab["run"].tolist())
    ax.set_xlim(0, 114)
    ax.set_xlabel("share of rollout instance-time (%); right: decode slots held over the run, then groups in "
                  "flight over the (η+1)·B the staleness bound admits")
    runs = [d.attrs.get("run", {}) for _, d in label_runs(logs)]
    trace = {str(r.get("trace", "")) for r in runs} - {""}
    ax.set_title(title or ("Where the decode slots go" + (f" on {trace.pop()}" if len(trace) == 1 else "")),
                 fontsize=10, pad=24)
    handles = [Patch(facecolor=STATE_STYLE[s][0], label=STATE_STYLE[s][1]) for s in present]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(present), fontsize=8,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return fig
