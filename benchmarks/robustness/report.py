"""The grid's tables: the tidy one (a row per run), the per-configuration summary and its printed
text, and the ablation table with its paired bootstrap interval."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .jobs import Job, Resolved, display_path
from .spec import BASELINES, METRICS, OPTIONAL_METRICS, THRESHOLD


def config_columns(r: Resolved) -> dict[str, Any]:
    c = r.config
    return {"config": c.name, "family": c.family, "kind": c.kind, "variation": c.variation, "hw": c.hw,
            "hardware": c.hardware, "model": c.model, "devices_per_instance": c.devices_per_instance,
            "instances": c.instances, "max_seqs": c.max_seqs, "eta": c.eta, "load": c.load,
            "batch_size": c.batch_size, "trainer_devices": c.instances * c.devices_per_instance,
            "target_steps": r.steps, "trace": display_path(r.trace), "trace_source": r.source}


def tidy(jobs: list[Job], results: dict[str, dict]) -> pd.DataFrame:
    """One row per configuration x variant that has a result."""
    rows = []
    for j in jobs:
        rec = results.get(j.key)
        if rec is None:
            continue
        m = rec["metrics"]
        rows.append({**config_columns(j.res), "replica": j.res.replica, "variant": j.variant, "policy": j.policy,
                     **{k: m.get(k, math.nan) for k in METRICS if k in m or k not in OPTIONAL_METRICS}})
    return pd.DataFrame(rows)


def best_baseline(base: pd.DataFrame) -> pd.Series:
    """Per configuration (rows: mean throughput of each baseline column), the fastest baseline's
    name; NaN where every baseline failed."""
    some = base.notna().any(axis=1)
    return base[some].idxmax(axis=1).reindex(base.index)


def summarize(tab: pd.DataFrame, commands: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per configuration: the best baseline, dora's ratios to it (with the paired 95%
    interval over replicas, `best_interval`) and to partial, C1-C3 held, and (`commands`: config
    -> text) the `python -m dora.sim` arguments that reproduce it."""
    if tab.empty:
        return pd.DataFrame()
    e2e = tab.pivot_table(index="config", columns="variant", values="e2e_samples_per_s", aggfunc="mean")
    first = tab.drop_duplicates("config").set_index("config")
    out = first[list(tab.columns[1:tab.columns.get_loc("replica")])].copy()  # config_columns, but "config"
    out["replicas"] = tab.groupby("config")["replica"].nunique()
    base = e2e[[b for b in BASELINES if b in e2e.columns]]
    nan = pd.Series(math.nan, index=e2e.index)
    out["best_baseline"] = best_baseline(base)
    out["best_baseline_samples_per_s"] = base.max(axis=1) if not base.empty else nan
    out["dora_samples_per_s"] = e2e["dora"] if "dora" in e2e else nan
    out["partial_samples_per_s"] = e2e["partial"] if "partial" in e2e else nan
    out["dora_vs_best"] = out["dora_samples_per_s"] / out["best_baseline_samples_per_s"]
    ci = best_interval(tab, out["best_baseline"]).reindex(out.index)
    out["dora_vs_best_lo"], out["dora_vs_best_hi"] = ci["lo"], ci["hi"]
    out["dora_vs_partial"] = out["dora_samples_per_s"] / out["partial_samples_per_s"]
    if "partial_areal" in e2e:
        out["dora_vs_partial_areal"] = out["dora_samples_per_s"] / e2e["partial_areal"]
        out["partial_areal_c3_violations"] = tab[tab["variant"] == "partial_areal"].groupby("config")[
            "c3_violations"].sum().reindex(out.index)
    for col in ("eta_bound_fraction", "eta_bound_placement_fraction"):
        if col in tab:
            out[f"dora_{col}"] = tab[tab["variant"] == "dora"].groupby("config")[col].mean().reindex(out.index)
    dora = tab[tab["variant"] == "dora"].groupby("config")[
        ["c1_violations", "c2_lost", "c2_duplicated", "c3_violations"]].sum().reindex(out.index)
    out["dora_c1_ok"] = dora["c1_violations"] == 0
    out["dora_c2_ok"] = (dora["c2_lost"] == 0) & (dora["c2_duplicated"] == 0)
    out["dora_c3_ok"] = dora["c3_violations"] == 0
    for v in tab["variant"].drop_duplicates():
        out[f"e2e.{v}"] = e2e[v]
    if commands:
        out["command"] = [commands.get(c, "") for c in out.index]
    order = {n: i for i, n in enumerate(tab["config"].drop_duplicates())}
    return out.sort_index(key=lambda ix: ix.map(order)).reset_index()


def best_interval(tab: pd.DataFrame, best: pd.Series) -> pd.DataFrame:
    """Per configuration with two or more replicas that ran both dora and its best baseline
    (`best`: config -> variant), the paired 95% bootstrap interval (`paired_ci`) of dora / best:
    columns lo, hi."""
    runs = tab.pivot_table(index=["config", "replica"], columns="variant", values="e2e_samples_per_s")
    rows = {}
    if "dora" in runs:
        for cfg, b in best.dropna().items():
            pair = replica_pairs(runs, cfg, "dora", b)
            if len(pair) >= 2:
                rows[cfg] = paired_ci(*pair.T)
    return pd.DataFrame.from_dict(rows, orient="index", columns=["lo", "hi"]).reindex(best.index)


def replica_pairs(runs: pd.DataFrame, cfg: str, a: str, b: str) -> np.ndarray:
    """`cfg`'s replicas that ran both variants, as rows (a's throughput, b's); `runs` is the tidy
    table pivoted to (config, replica) x variant."""
    return runs.loc[cfg, [a, b]].dropna().to_numpy()


def unsettled(tab: pd.DataFrame, threshold: float = THRESHOLD) -> list[str]:
    """Configurations (in table order) on which some replica's dora run is below `threshold` x the
    same replica's run of the configuration's best baseline (best on average over the replicas):
    their replicas do not agree that dora clears the bar, whichever way the average falls."""
    e2e = tab.pivot_table(index=["config", "replica"], columns="variant", values="e2e_samples_per_s")
    base = [b for b in BASELINES if b in e2e.columns]
    if "dora" not in e2e or not base:
        return []
    best = best_baseline(e2e[base].groupby(level="config").mean())
    low = {cfg for cfg, runs in e2e.groupby(level="config")
           if isinstance(best[cfg], str) and (runs["dora"] < threshold * runs[best[cfg]]).any()}
    return [c for c in tab["config"].drop_duplicates() if c in low]


def summary_text(summ: pd.DataFrame) -> str:
    """The printed summary of dora / best baseline (and / partial) over the configurations."""
    r = summ["dora_vs_best"].dropna()
    if r.empty:
        return "no configuration has both dora and a baseline"
    low = summ[summ["dora_vs_best"] < 0.99].sort_values("dora_vs_best")
    sure = low[low["dora_vs_best_hi"] < 0.99] if "dora_vs_best_hi" in low else low.iloc[:0]
    lines = [f"{len(r)} configurations: dora / best baseline min {r.min():.3f} ({summ.loc[r.idxmin(), 'config']}), "
             f"median {r.median():.3f}, max {r.max():.3f}; dora >= 1.10x on {(r >= 1.10).mean():.0%} "
             f"({(r >= 1.10).sum()}/{len(r)}), below 0.99 on {len(low)}, of them with the replicas' 95% "
             f"interval below 0.99 too on {len(sure)}"]
    for _, row in low.iterrows():
        hi = row.get("dora_vs_best_hi", math.nan)
        ci = (f", interval {row['dora_vs_best_lo']:.3f}-{hi:.3f} over {row['replicas']} replicas"
              if not math.isnan(hi) else "")
        lines.append(f"  {row['config']:<36} {row['dora_vs_best']:.3f}  (dora {row['dora_samples_per_s']:.2f} vs "
                     f"{row['best_baseline']} {row['best_baseline_samples_per_s']:.2f} samples/s{ci})")
    p = summ["dora_vs_partial"].dropna()
    if not p.empty:
        lines.append(f"dora / partial: min {p.min():.3f} ({summ.loc[p.idxmin(), 'config']}), median {p.median():.3f}, "
                     f"below 1 on {(p < 1).sum()}/{len(p)}")
    if "dora_vs_partial_areal" in summ:
        a = summ["dora_vs_partial_areal"].dropna()
        c3 = summ["partial_areal_c3_violations"]
        lines.append(f"dora / partial_areal (AReaL's own rule, no C3 wait): median {a.median():.3f}, below 1 on "
                     f"{(a < 1).sum()}/{len(a)}; it broke C3 on {(c3 > 0).sum()}/{len(c3)} configurations")
    for col, what in (("dora_eta_bound_fraction", "eta-aware bound"),
                      ("dora_eta_bound_placement_fraction",
                       "eta-aware bound of its placement (the trainer's devices only train)")):
        if col in summ:
            f = summ[col].dropna()
            lines.append(f"dora / {what}: median {f.median():.3f}, min {f.min():.3f}, max {f.max():.3f}")
    held = summ[["dora_c1_ok", "dora_c2_ok", "dora_c3_ok"]].all(axis=1)
    lines.append(f"dora held C1-C3 on {held.sum()}/{len(held)} configurations"
                 + ("" if held.all() else ": not on " + ", ".join(summ.loc[~held, "config"])))
    wins = summ["best_baseline"].value_counts()
    lines.append("best baseline: " + ", ".join(f"{k} {v}" for k, v in wins.items()))
    return "\n".join(lines)


def paired_ci(default: np.ndarray, flipped: np.ndarray, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of mean(default) / mean(flipped) over replicas resampled in pairs
    (a replica's two runs share its trace window and seed)."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(default), (draws, len(default)))
    r = default[i].mean(axis=1) / flipped[i].mean(axis=1)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return float(lo), float(hi)


def ablation_table(tab: pd.DataFrame) -> str:
    """Markdown: per mechanism, dora(default) / dora(flipped) over the configurations; of the
    configurations below 0.98x, how many lose for sure (the paired 95% interval below 1)."""
    e2e = tab.pivot_table(index="config", columns="variant", values="e2e_samples_per_s", aggfunc="mean")
    runs = tab.pivot_table(index=["config", "replica"], columns="variant", values="e2e_samples_per_s")
    head = ["mechanism flipped", "configs", "mean", "min", "max", "default < 0.98 x flipped",
            "of them, 95% interval < 1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for v in tab["variant"].drop_duplicates():  # ABLATIONS order
        if v == "dora":
            continue
        r = (e2e["dora"] / e2e[v]).dropna()
        if r.empty:
            continue
        below = r.index[r < 0.98]
        sure = "–"
        if tab["replica"].nunique() > 1:
            sure = str(sum(paired_ci(*replica_pairs(runs, c, "dora", v).T)[1] < 1.0 for c in below))
        lines.append(f"| {v} | {len(r)} | {r.mean():.3f} | {r.min():.3f} ({r.idxmin()}) | {r.max():.3f} "
                     f"({r.idxmax()}) | {len(below)} | {sure} |")
    return ("dora(default) / dora(flipped), e2e samples/s: > 1 = the mechanism helps\n\n" + "\n".join(lines))
