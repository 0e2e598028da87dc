"""Throughput against a swept parameter (instances, η, tail heaviness, ...): one line per policy.

A sweep table is tidy: one row per run with a `policy` column, the swept field and metric
columns (e2e_samples_per_s, ...). It can come from a DataFrame, a parquet or CSV file, or the
`--json` files of `python -m dora.sim` (config and metrics flattened: `instances`, `eta`,
`cluster.max_seqs`, `moe_imbalance_cv`, ... and every metric name).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dora.errors import InputError
from dora.metrics import METRIC_NAMES
from dora.plots.style import policy_color, policy_order, subplots

METRIC_LABELS = {
    "e2e_samples_per_s": "end-to-end throughput (trained samples/s)",
    "e2e_tokens_per_s": "end-to-end throughput (trained tokens/s)",
    "rollout_tokens_per_s": "rollout throughput (generated tokens/s)",
    "bubble_ratio": "bubble ratio (fraction of device-seconds)",
    "speedup_vs_sync": "speedup over sync (x)",
    "step_time_mean_s": "mean step time (s)",
}


KNOBS = ("eta", "batch_size", "group_size", "steps", "seed", "moe_imbalance_cv", "max_seqs", "kv_tokens")


X_LABELS = {
    "cluster.instances": "rollout instances", "instances": "rollout instances",
    "policy.eta": "staleness bound \u03b7 (versions)", "eta": "staleness bound \u03b7 (versions)",
    "policy.batch_size": "batch size B (prompt groups per step)", "batch_size": "batch size B (prompt groups per step)",
    "cluster.max_seqs": "decode slots per instance", "cluster.trainer_devices": "trainer devices",
    "moe_imbalance_cv": "MoE imbalance (CV of instance speed)", "tail_alpha": "tail index \u03b1 (smaller = heavier)",
    "tail_prob": "share of trajectories in the tail",
    "target_steps": "trainer steps simulated", "cluster.devices_per_instance": "devices per rollout instance",
}


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        elif not isinstance(v, (list, tuple)):
            out[key] = v
    return out


SOURCES = "pass the --out or --csv of python -m dora.sim sweep, or a dora.sim --json file"


def read_sweep(paths) -> pd.DataFrame:
    """A tidy sweep table from parquet / CSV tables or dora.sim --json files (rows concatenated)."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise InputError("sweep: no input; pass sweep tables (.parquet, .csv) or dora.sim --json files")
    frames = []
    for p in map(Path, paths):
        if not p.is_file():
            raise InputError(f"sweep table {p}: file not found; {SOURCES}")
        suf = p.suffix.lower()
        try:
            if suf == ".json":
                data = json.loads(p.read_text())
                runs = data.get("runs") if isinstance(data, dict) else None
                if not isinstance(runs, list) or not runs:
                    raise InputError(f"sweep table {p}: no 'runs' list; expected the --json output of "
                                     "python -m dora.sim")
                rows = []
                metric_names: set[str] = set()
                for r in runs:
                    row = {"policy": r.get("policy")}
                    cfg = r.get("config", {})
                    row.update(_flatten(cfg))
                    mets = _flatten(r.get("metrics", {}))
                    metric_names.update(mets)
                    row.update(mets)
                    row["source"] = str(p)
                    rows.append(row)
                f = pd.DataFrame(rows)
                f.attrs["metrics"] = sorted(metric_names)
                frames.append(f)
            elif suf == ".csv":
                frames.append(pd.read_csv(p))
            elif suf == ".parquet":
                frames.append(pd.read_parquet(p))
            else:
                raise InputError(f"sweep table {p}: unknown type '{suf}'; use .parquet, .csv or a dora.sim --json file")
        except InputError:
            raise
        except Exception as e:
            raise InputError(f"sweep table {p}: not readable as {suf.lstrip('.')} ({type(e).__name__}); "
                             f"{SOURCES}") from None
    out = pd.concat(frames, ignore_index=True)
    out.attrs["metrics"] = sorted({m for f in frames for m in f.attrs.get("metrics", [])})
    return out


def guess_x(tab: pd.DataFrame, y: str) -> str:
    """The swept column: the one non-metric column that varies (InputError naming the candidates if not one)."""
    skip = set(METRIC_NAMES) | {"policy", "source", y, "speedup_vs_sync", "bound_samples_per_s", "bound_fraction",
                                "eta_bound_samples_per_s", "eta_bound_fraction", "eta_bound_placement_samples_per_s",
                                "eta_bound_placement_fraction", "sim_wall_s", "events", "sim_time_s"}
    skip |= set(tab.attrs.get("metrics", []))
    # a swept column takes several values among the runs of one policy (not just between policies)
    pol = tab["policy"].astype(str) if "policy" in tab.columns else pd.Series("", index=tab.index)
    cand = [c for c in tab.columns if c not in skip and not c.startswith("bound.")
            and pd.api.types.is_numeric_dtype(tab[c]) and not pd.api.types.is_bool_dtype(tab[c])
            and tab[c].groupby(pol).nunique(dropna=True).max() > 1]
    if len(cand) == 1:
        return cand[0]
    if not cand:
        raise InputError("sweep: no field takes several values among one policy's runs; give runs of a sweep "
                         "(e.g. one --json file per setting) or name the swept column with --x")
    knobs = [c for c in cand if c.split(".")[0] in ("cluster", "policy", "cost") or c in KNOBS]
    cand = knobs or cand
    # a run fact and the config knob it comes from (instances / cluster.instances): take the knob
    cand = [c for c in cand if not any(d.endswith("." + c) for d in cand)]
    if len(cand) == 1:
        return cand[0]
    raise InputError(f"sweep: several columns vary ({', '.join(cand[:6])}); name the swept one with --x")


def _check_finite(tab: pd.DataFrame, col: str, numeric: bool) -> None:
    """InputError naming the first row whose `col` is not a finite number (a text column is fine
    where `numeric` is False: it is drawn as categories)."""
    if not pd.api.types.is_numeric_dtype(tab[col]) or pd.api.types.is_bool_dtype(tab[col]):
        if numeric:
            raise InputError(f"sweep table: column '{col}' is not numeric (e.g. {tab[col].iloc[0]!r}); choose a "
                             "metric column with --y")
        return
    bad = np.flatnonzero(~np.isfinite(tab[col].to_numpy(float)))
    if len(bad):
        r = int(bad[0])
        raise InputError(f"sweep table: column '{col}', row {r} (0-based): {tab[col].iloc[r]} is not a finite number; "
                         "drop such rows or choose another column")


def sweep_plot(table, x: str | None = None, y: str = "e2e_samples_per_s", title: str | None = None):
    """Lines of `y` against `x`, one per policy (mean over repeated runs, min-max as a band);
    the bubble-free bound is drawn dashed when the table has bound_samples_per_s."""
    tab = table if isinstance(table, pd.DataFrame) else read_sweep(table)
    for c in ("policy", y):
        if c not in tab.columns:
            fix = (f"choose a metric column with --y (columns: {', '.join(map(str, tab.columns[:12]))})" if c == y
                   else f"pass a table from python -m dora.sim sweep (it has policy, the swept field and {y})")
            raise InputError(f"sweep table: column '{c}' missing; {fix}")
    x = x or guess_x(tab, y)
    if x not in tab.columns:
        raise InputError(f"sweep table: no column '{x}'; choose the swept column with --x from "
                         f"{', '.join(map(str, tab.columns[:12]))}")
    _check_finite(tab, y, numeric=True)
    _check_finite(tab, x, numeric=False)
    fig, ax = subplots(figsize=(8, 5))
    pols = sorted(tab["policy"].astype(str).unique(),
                  key=lambda p: (policy_order().index(p) if p in policy_order() else 99, p))
    for i, p in enumerate(pols):
        g = tab[tab["policy"].astype(str) == p].groupby(x)[y].agg(["mean", "min", "max"]).sort_index()
        c = policy_color(p, i)
        ax.plot(g.index, g["mean"], marker="o", color=c, label=p)
        if (g["max"] > g["min"]).any():
            ax.fill_between(g.index, g["min"], g["max"], color=c, alpha=0.15)
    if y == "e2e_samples_per_s" and "bound_samples_per_s" in tab.columns:
        b = tab.groupby(x)["bound_samples_per_s"].mean().sort_index()
        ax.plot(b.index, b.values, color="black", linestyle="--", linewidth=1, label="bubble-free bound")
    xv = pd.to_numeric(tab[x], errors="coerce").dropna()
    if len(xv) and (xv > 0).all() and xv.max() / xv.min() >= 4:
        ax.set_xscale("log", base=2 if np.allclose(np.log2(xv), np.round(np.log2(xv))) else 10)
        vals = np.unique(xv)
        if len(vals) <= 12:  # label the swept values themselves
            ax.set_xticks(vals)
            ax.set_xticklabels([f"{v:g}" for v in vals])
            ax.minorticks_off()
    xl = X_LABELS.get(x, x)
    ax.set_xlabel(xl + (" (log scale)" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel(METRIC_LABELS.get(y, y))
    ax.set_title(title or f"{METRIC_LABELS.get(y, y).split(' (')[0].capitalize()} against {xl.split(' (')[0]}",
                 fontsize=10)
    ax.legend(fontsize=8, frameon=False, title="policy", title_fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    return fig
