"""Is a change to dora faster? dora's throughput in two source trees, replica by replica.

  python benchmarks/compare_trees.py --tree /path/to/main --tree .                 # the quick set, 8 replicas
  python benchmarks/compare_trees.py --tree A --tree B --only drift_up/base --replicas 16
  python benchmarks/compare_trees.py --tree A --tree B --set policy.dora.consolidate=false

Each tree runs the robustness grid's configurations (this checkout's grid: its --quick set, or
the configurations whose names contain an --only substring) for dora alone, in its own process
with its own `dora` first on the path (its compiled modules if built there), through the grid's
per-run cache (a tree's runs are keyed by its dora source, so the unchanged tree costs nothing
the second time). `--set` applies to both trees. Per configuration it prints the second tree's
mean end-to-end samples/s over the first's, the paired 95% bootstrap interval (replica i of both
trees shares its trace window and seed; `robustness_grid.paired_ci`) and C1-C3 violations of
the second tree; then the mean, the range, and how many configurations fall below 0.98x (and of
them, how many with the interval below 1: a loss the replicas agree on). `--csv` keeps every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import robustness_grid as rg  # noqa: E402

from dora.errors import ArgumentParser, InputError  # noqa: E402
from dora.io import atomic_path, check_output  # noqa: E402

VIOLATIONS = ("c1_violations", "c2_lost", "c2_duplicated", "c3_violations")

# runs inside the tree under test: argv = [options as JSON, output CSV]
_CHILD = r"""
import argparse, json, sys
from pathlib import Path
import dora  # the tree's (the working directory), before the grid puts this checkout on the path
if Path(dora.__file__).resolve().parents[1] != Path.cwd().resolve():
    sys.exit(f"compare_trees: dora was imported from {{dora.__file__}}, not from {{Path.cwd()}}")
sys.path.insert(0, {grid_dir!r})
import robustness_grid as rg
o = json.loads(sys.argv[1])
configs = rg.select(argparse.Namespace(quick=not o["only"], only=o["only"], limit=None))
notes = rg.Notes()
traces = rg.Traces(Path(o["trace_cache"]), True)
res = rg.resolve(configs, traces, notes, None, o["replicas"])
jobs = rg.make_jobs(res, {{"dora": ("dora", tuple(o["set"]))}}, traces, notes)
results, failures, _ = rg.run_jobs(jobs, Path(o["cache"]), False, o["jobs"], o["quiet"])
if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
rg.tidy(jobs, results).to_csv(sys.argv[2], index=False)
"""


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: both trees' mean e2e samples/s, b / a, the paired 95% interval (over the
    replicas both ran) and the second tree's C1-C3 violations summed over its replicas."""
    e2e = "e2e_samples_per_s"
    pairs = a[["config", "replica", e2e]].merge(b[["config", "replica", e2e]], on=["config", "replica"],
                                                 suffixes=("_a", "_b")).rename(columns={f"{e2e}_a": "a", f"{e2e}_b": "b"})
    rows = []
    for config, pair in pairs.groupby("config", sort=True):
        rb = b[b["config"] == config]
        lo, hi = rg.paired_ci(pair["b"].to_numpy(), pair["a"].to_numpy()) if len(pair) > 1 else (np.nan, np.nan)
        rows.append({"config": config, "replicas": len(pair), "a": pair["a"].mean(), "b": pair["b"].mean(),
                     "ratio": pair["b"].mean() / pair["a"].mean(), "ci_lo": lo, "ci_hi": hi,
                     "violations": int(rb[[v for v in VIOLATIONS if v in rb.columns]].to_numpy().sum())})
    return pd.DataFrame(rows).set_index("config").sort_values("ratio") if rows else pd.DataFrame()


def summary_line(cmp: pd.DataFrame) -> str:
    r = cmp["ratio"]
    below = cmp[r < 0.98]
    sure = int((below["ci_hi"] < 1.0).sum())
    return (f"{len(cmp)} configurations: second tree / first mean {r.mean():.3f}, min {r.min():.3f} "
            f"({r.idxmin()}), max {r.max():.3f} ({r.idxmax()}); below 0.98x on {len(below)}, of them "
            f"{sure} with the 95% interval below 1; C1-C3 violations {int(cmp['violations'].sum())}")


def run_tree(tree: Path, opts: dict, out: Path) -> pd.DataFrame:
    """The tree's dora runs (its own `dora` first on the path) as the grid's tidy table."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    child = _CHILD.format(grid_dir=str(HERE))
    proc = subprocess.run([sys.executable, "-c", child, json.dumps(opts), str(out)], env=env, cwd=str(tree), check=False)
    if proc.returncode != 0:
        raise SystemExit(f"compare_trees: the runs in {tree} failed (exit {proc.returncode}; see above)")
    return pd.read_csv(out)


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="benchmarks/compare_trees.py", description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], type=Path, help="a source tree (twice: first, second)")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                    help="configurations whose names contain it (default: the quick set)")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a dora override, both trees")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=rg.DEFAULT_CACHE)
    ap.add_argument("--trace-cache", type=Path, default=rg.DEFAULT_TRACE_CACHE)
    ap.add_argument("--csv", type=Path, help="every run of both trees (column `tree`: 1 or 2)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if len(a.tree) != 2:
        ap.error(f"--tree: give exactly two source trees (first, then second), got {len(a.tree)}")
    for t in a.tree:
        if not (t / "dora" / "__init__.py").is_file():
            ap.error(f"--tree {t}: no dora package there (dora/__init__.py); give a checkout of this repository")
    if a.replicas < 1 or a.jobs < 1:
        ap.error("--replicas and --jobs: must be at least 1")
    try:
        rg.check_sets("dora", a.set)
    except InputError as e:
        ap.error(f"--set: {e}")
    if a.csv is not None:
        try:
            check_output(a.csv, ("csv",), "--csv", "runs.csv")
        except InputError as e:
            ap.error(str(e))
    names = [c.name for c in rg.grid()]
    for sub in a.only:
        if not any(sub in n for n in names):
            ap.error(f"--only {sub}: no configuration of the grid contains it "
                     "(python benchmarks/robustness_grid.py --list names them)")
    opts = {"only": a.only, "replicas": a.replicas, "set": a.set, "jobs": a.jobs, "cache": str(a.cache),
            "trace_cache": str(a.trace_cache), "quiet": a.quiet}
    with tempfile.TemporaryDirectory() as tmp:
        tabs = [run_tree(t.resolve(), opts, Path(tmp) / f"tree{i}.csv") for i, t in enumerate(a.tree, 1)]
    cmp = compare(*tabs)
    if cmp.empty:
        print("compare_trees: no configuration ran in both trees", file=sys.stderr)
        return 1
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(cmp.to_string(float_format=lambda x: f"{x:.3f}"))
    print(summary_line(cmp))
    if a.csv:
        with atomic_path(a.csv) as tmp:
            pd.concat([t.assign(tree=i) for i, t in enumerate(tabs, 1)]).to_csv(tmp, index=False)
        print(f"wrote {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
