"""The grid's figure: heatmaps of dora / best baseline and dora / partial (trace family x
variation) and every configuration's ratio by family."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .spec import BASELINES, TRACES, grid

RATIO_TICKS = (0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


def _ratio_colorbar(fig, im, ax, limit: float, label: str) -> None:
    ticks = [t for t in RATIO_TICKS if abs(math.log2(t)) <= limit + 1e-9
             and not (limit > 0.7 and t in (0.9, 1.1))]  # no crowding near 1 on a wide scale
    cb = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01, ticks=[math.log2(t) for t in ticks])
    cb.ax.set_yticklabels([f"{t:g}" for t in ticks], fontsize=8)
    cb.set_label(label, fontsize=9)


def _heat(fig, ax, m: np.ndarray, rows: list[str], cols: list[str], limit: float, title: str, label: str) -> None:
    import matplotlib

    from matplotlib.colors import Normalize

    cmap = matplotlib.colormaps["RdBu"].copy()
    cmap.set_bad("#e6e6e6")
    lg = np.log2(m)
    im = ax.imshow(np.ma.masked_invalid(lg), cmap=cmap, norm=Normalize(-limit, limit), aspect="auto",
                   interpolation="nearest")
    for i in range(m.shape[0]):
        for k in range(m.shape[1]):
            if np.isfinite(m[i, k]):
                ax.text(k, i, f"{m[i, k]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(lg[i, k]) > 0.6 * limit else "black")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=50, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=9)
    ax.set_xticks(np.arange(-0.5, len(cols)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0)
    ax.tick_params(which="minor", length=0)
    ax.set_title(title, fontsize=10, loc="left")
    _ratio_colorbar(fig, im, ax, limit, label)


def heatmap(summ: pd.DataFrame, out: Path, title: str) -> Path:
    """dora / best baseline and dora / partial: trace family (rows) x variation from the base point
    (columns), the random combinations left out; then every configuration's dora / best baseline
    by family (random ones included)."""
    from dora.plots.style import save, subplots

    fams = [f for f in TRACES if f in set(summ["family"])]
    structured = summ[summ["kind"] != "random"]
    order = list(dict.fromkeys(c.variation for c in grid() if c.kind != "random"))
    cols = [v for v in order if v in set(structured["variation"])]
    ratios = {}
    for what in ("dora_vs_best", "dora_vs_partial"):
        piv = structured.pivot(index="family", columns="variation", values=what)
        ratios[what] = piv.reindex(index=fams, columns=cols).to_numpy(dtype=float)
    finite = np.concatenate([np.abs(np.log2(m[np.isfinite(m)])) for m in ratios.values()] + [np.zeros(1)])
    limit = float(np.clip(np.max(finite), math.log2(1.25), 2.0))
    nrow, ncol = len(fams), len(cols)
    width = max(10.0, 0.55 * ncol + 3.5)
    panel = 0.42 * nrow + 1.6
    fig, axes = subplots(3, 1, figsize=(width, 2 * panel + 0.35 * nrow + 2.2))
    fig.set_layout_engine("constrained")
    fig.get_layout_engine().set(h_pad=0.15)
    for ax in axes:
        ax.set_box_aspect(None)
    axes[0].get_gridspec().set_height_ratios([panel, panel, 0.35 * nrow + 1.0])
    _heat(fig, axes[0], ratios["dora_vs_best"], fams, cols, limit,
          "dora / best baseline (max of " + ", ".join(BASELINES) + "): > 1 blue = dora faster; grey: not run",
          "dora / best baseline")
    _heat(fig, axes[1], ratios["dora_vs_partial"], fams, cols, limit,
          "dora / partial (AReaL; breaks C1 by design, not a must-beat)", "dora / partial")
    ax = axes[2]
    for i, fam in enumerate(fams):
        sub = summ[summ["family"] == fam]
        for rand, marker, lab in ((False, "o", "structured"), (True, "x", "random combination")):
            pts = sub[(sub["kind"] == "random") == rand]["dora_vs_best"].dropna()
            ax.scatter(np.log2(pts), np.full(len(pts), i), marker=marker, s=22, alpha=0.7,
                       color="#2166ac" if not rand else "#b2182b", label=lab if i == 0 else None)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.axvline(math.log2(1.1), color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(nrow))
    ax.set_yticklabels(fams, fontsize=9)
    ax.set_ylim(nrow - 0.5, -0.5)
    allr = np.log2(summ["dora_vs_best"].dropna().to_numpy())
    lo, hi = (min(allr.min(), -0.1), max(allr.max(), 0.2)) if len(allr) else (-0.5, 0.5)
    ticks = [t for t in RATIO_TICKS if lo - 0.05 <= math.log2(t) <= hi + 0.05]
    ax.set_xticks([math.log2(t) for t in ticks])
    ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=8)
    ax.set_xlim(lo - 0.08, hi + 0.08)
    ax.set_xlabel("dora / best baseline (log scale; dashed: 1.10)", fontsize=9)
    ax.set_title("every configuration, by trace family", fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)
    fig.suptitle(title, fontsize=11)
    return save(fig, out)
