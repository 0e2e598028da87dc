"""Collect the runs of benchmarks/exec_gpu.sh into one JSON and print their table.

  tar -xzf DIR/runs.tar.gz -C D
  python benchmarks/exec_gpu_collect.py D --command "STEPS=20 ... benchmarks/exec_gpu.sh DIR ..." \\
      --out docs/results/exec_gpu_<name>.json

Reads D/env.txt (the machine), every D/calib/<policy>.json (seed 0) and D/fresh/<policy>.json
(seed 1) with its event log D/<seed dir>/ev.<policy>.parquet and recorded trajectories
rec.<policy>.parquet, and writes {machine, command, runs: [{policy, seed_dir, config, metrics,
weight_sync_ms, answers}]} (weight_sync_ms: median and max of the collective broadcasts from the
log's weight_sync_start/end rows; answers: the mean answer length and its relative standard error
over the run's prompts). The table printed has one row per
policy, seed 0 / seed 1 side by side.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dora.analysis import weight_syncs
from dora.errors import ArgumentParser

SEED_DIRS = ("calib", "fresh")  # seed 0, seed 1 (benchmarks/exec_gpu.sh)


def collect(root: Path) -> list[dict]:
    """Every run under root/calib and root/fresh, in the order the policies first appear."""
    runs = []
    for d in SEED_DIRS:
        for p in sorted((root / d).glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name)):
            run = json.loads(p.read_text())["runs"][0]
            pol = run["policy"]
            runs.append({"policy": pol, "seed_dir": d, "config": run["config"], "metrics": run["metrics"],
                         "weight_sync_ms": sync_ms(root / d / f"ev.{pol}.parquet"),
                         "answers": answers(root / d / f"rec.{pol}.parquet")})
    return runs


def sync_ms(ev: Path) -> dict | None:
    """Median and max milliseconds of a run's collective weight syncs (its event log's
    weight_sync_start/end rows, `dora.analysis.weight_syncs`); None without a log or a sync."""
    if not ev.exists():
        return None
    ws = weight_syncs(pd.read_parquet(ev))
    dur = (ws["t1"] - ws["t0"]).to_numpy() * 1e3
    return {"median": float(np.median(dur)), "max": float(dur.max()), "n": int(len(dur))} if len(dur) else None


def answers(rec: Path) -> dict | None:
    """Mean answer length of a run's recorded trajectories (--trace-out) and its standard error
    over the run's prompts (from the prompts' group means: a group's samples share a prompt)."""
    if not rec.exists():
        return None
    r = pd.read_parquet(rec, columns=["prompt_id", "response_len"])
    g = r.groupby("prompt_id")["response_len"].mean()
    se = float(g.std() / np.sqrt(len(g)) / g.mean()) if len(g) > 1 else float("nan")
    return {"mean": float(r["response_len"].mean()), "prompts": int(len(g)), "se_rel": se}


def table(runs: list[dict]) -> str:
    """Markdown: policy | e2e samples/s | × sync | step time | bubble | staleness | migrations | sync ms |
    c1 c2 c3 | mean answer."""
    order = list(dict.fromkeys(r["policy"] for r in runs))
    by = {(r["policy"], r["seed_dir"]): r for r in runs}
    sync = {d: by[("sync", d)]["metrics"]["e2e_samples_per_s"] for d in SEED_DIRS if ("sync", d) in by}

    def both(p: str, f) -> str:
        return " / ".join(f(by[(p, d)], d) for d in SEED_DIRS if (p, d) in by)

    def m(r: dict) -> dict:
        return r["metrics"]

    def a(r: dict) -> dict:
        return r["answers"] or {"mean": float("nan"), "se_rel": float("nan")}

    lines = ["| policy | e2e samples/s seed 0 / 1 | × sync | step time s | bubble | staleness mean / max | "
             "migrations (re-prefilled tokens) | weight sync ms median, max | c1 c2 c3 | mean answer (s.e.) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in order:
        lines.append("| " + " | ".join([
            p,
            both(p, lambda r, d: f"{m(r)['e2e_samples_per_s']:.1f}"),
            both(p, lambda r, d: f"{m(r)['e2e_samples_per_s'] / sync[d]:.2f}" if d in sync else "n/a"),
            both(p, lambda r, d: f"{m(r)['step_time_mean_s']:.2f}"),
            both(p, lambda r, d: f"{m(r)['bubble_ratio']:.2f}"),
            both(p, lambda r, d: f"{m(r)['staleness_mean']:.2f}, {m(r)['staleness_max']}"),
            both(p, lambda r, d: f"{m(r)['migrations']} ({m(r)['reprefill_tokens']:,})"),
            both(p, lambda r, d: "n/a" if r["weight_sync_ms"] is None else
                 f"{r['weight_sync_ms']['median']:.0f}, {r['weight_sync_ms']['max']:.0f}"),
            both(p, lambda r, d: f"{m(r)['c1_violations']} {m(r)['c2_lost'] + m(r)['c2_duplicated']} "
                                 f"{m(r)['c3_violations']}"),
            both(p, lambda r, d: f"{a(r)['mean']:.1f} ({a(r)['se_rel']:.1%})"),
        ]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="benchmarks/exec_gpu_collect.py", description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, help="an unpacked runs.tar.gz of benchmarks/exec_gpu.sh")
    ap.add_argument("--command", default="", help="the exec_gpu.sh command that made the runs (recorded)")
    ap.add_argument("--out", type=Path, help="write the runs here as JSON")
    a = ap.parse_args(argv)
    if not (a.root / "calib").is_dir():
        ap.error(f"{a.root}: no calib/ folder; give the folder runs.tar.gz was unpacked into")
    runs = collect(a.root)
    env = (a.root / "env.txt").read_text().strip().splitlines() if (a.root / "env.txt").exists() else []
    if a.out:
        a.out.write_text(json.dumps({"machine": " | ".join(env), "command": a.command, "runs": runs}, indent=1) + "\n")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
