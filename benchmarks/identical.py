"""Do two source trees simulate identically? The check behind "results identical" after a refactor.

  python benchmarks/identical.py --tree /path/to/old/checkout --tree .      # compare two trees
  python benchmarks/identical.py --tree . --out digest.json                  # one tree's digest

Each tree runs in its own process with its own `dora` first on the path (its compiled modules
if built there, else its Python source). The runs: the headline (every policy on
traces/moe_longtail.parquet at the defaults, 20 steps), the ten-configuration check (every
policy at 256 instances x 8 steps, plain and with instance failures + MoE redraws + relay weight
sync), and non-default settings: η = 1, dora with regeneration, elastic trainer devices and two
versions per instance, laminar without repack, partial with AReaL's own rule, a multi-turn trace
(code_agentic) and a generated heavy tail. For each run the digest holds every numeric metric
(but wall time) and sums over the event log (rows, times, busy seconds, tokens). Exit status 1
when two trees differ (the differing runs and metrics are printed), 0 when they agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALL = ("sync", "one_step", "partial", "laminar", "dora")
FAULTS = ["faults.mtbf_s=20000", "faults.repair_s=600", "imbalance.redraw_s=300", "weights.topology=relay"]
AT_256 = ["--instances", "256", "--trainer-devices", "256", "--batch-size", "128", "--steps", "8"]

# name -> (trace, policy, extra argv of python -m dora.sim, --set overrides)
RUNS: dict[str, tuple[str, str, list[str], list[str]]] = {}
for _p in ALL:
    RUNS[f"headline/{_p}"] = ("traces/moe_longtail.parquet", _p, [], [])
    RUNS[f"256x8/{_p}"] = ("traces/moe_longtail.parquet", _p, AT_256, [])
    RUNS[f"256x8+faults/{_p}"] = ("traces/moe_longtail.parquet", _p, AT_256, FAULTS)
RUNS.update({
    "eta1/dora": ("traces/moe_longtail.parquet", "dora", ["--eta", "1"], []),
    "eta1/partial": ("traces/moe_longtail.parquet", "partial", ["--eta", "1"], []),
    "dora_regenerate": ("traces/moe_longtail.parquet", "dora", [], ["policy.dora.max_regenerations=1"]),
    "dora_elastic": ("traces/moe_longtail.parquet", "dora", [], ["policy.dora.elastic_trainer=true"]),
    "dora_vpi2": ("traces/moe_longtail.parquet", "dora", [], ["policy.dora.versions_per_instance=2"]),
    "dora_kv_widen_cohort": ("traces/moe_longtail.parquet", "dora", [],  # the knobs off by default, on
                             ["policy.dora.migrate_kv=true", "policy.dora.widen_max=1.5",
                              "policy.dora.cohort_check=true"]),
    "laminar_norepack": ("traces/moe_longtail.parquet", "laminar", [], ["policy.laminar.repack=false"]),
    "partial_areal": ("traces/moe_longtail.parquet", "partial", [], ["policy.partial.strict_staleness=false"]),
    "code_agentic/dora": ("traces/code_agentic.parquet", "dora", [], []),
    "code_agentic/laminar": ("traces/code_agentic.parquet", "laminar", [], []),
    "dense_h100/dora": ("traces/dense_math.parquet", "dora",
                        ["--hardware", "H100", "--model", "qwen2.5-7b", "--instances", "128", "--max-seqs", "256",
                         "--trainer-devices", "128", "--batch-size", "512", "--eta", "2"], []),
})

# runs inside the tree under test: argv = [tree, json of RUNS]; prints one JSON digest
_CHILD = r"""
import json, sys
from dora.sim.cli import parser, resolve_config
from dora.sim.run import simulate
from dora.trace import load_trace
runs = json.loads(sys.argv[2])
out = {}
for name, (trace, policy, extra, sets) in runs.items():
    argv = ["--trace", f"{sys.argv[1]}/{trace}", "--policy", policy, *extra]
    for s in sets:
        argv += ["--set", s]
    cfg = resolve_config(parser().parse_args(argv))
    r = simulate(load_trace(cfg.trace), cfg, policy, progress=False)
    ev = r.events
    out[name] = {"metrics": {k: v for k, v in r.metrics.items() if k != "sim_wall_s" and isinstance(v, (int, float))},
                 "events": {"rows": len(ev), "t_sum": float(ev["t_s"].sum()), "busy_sum": float(ev["busy_s"].sum()),
                            "tokens_sum": int(ev["tokens"].sum())}}
    print(f"  {name}: {r.metrics['e2e_samples_per_s']:.4f} samples/s", file=sys.stderr, flush=True)
print(json.dumps(out))
"""
_CHILD_OLD_CLI = _CHILD.replace("from dora.sim.cli import", "from dora.sim.__main__ import")


def digest(tree: Path, runs: dict) -> dict:
    """Run `runs` in `tree` (its own dora first on the path) and return the digest."""
    tree = tree.resolve()
    child = _CHILD if (tree / "dora" / "sim" / "cli.py").is_file() else _CHILD_OLD_CLI  # trees from before the CLI split
    print(f"{tree}:", file=sys.stderr, flush=True)
    p = subprocess.run([sys.executable, "-c", child, str(REPO), json.dumps(runs)], cwd=tree, text=True,
                       stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(tree)})
    if p.returncode != 0:
        raise SystemExit(f"identical.py: the runs failed in {tree} (exit {p.returncode})")
    return json.loads(p.stdout)


def differences(a: dict, b: dict) -> list[str]:
    out = []
    for name in a:
        for part in ("metrics", "events"):
            for k in sorted(set(a[name][part]) | set(b[name][part])):
                va, vb = a[name][part].get(k), b[name][part].get(k)
                if va != vb:
                    out.append(f"{name} {k}: {va} != {vb}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, required=True,
                    help="a source tree (a checkout with dora/ in it); give two to compare")
    ap.add_argument("--only", action="append", default=[], help="run only the named runs (repeat; prefix match)")
    ap.add_argument("--out", type=Path, help="write the (first) tree's digest as JSON")
    args = ap.parse_args(argv)
    if len(args.tree) > 2:
        ap.error("--tree: give one tree, or two to compare")
    for t in args.tree:
        if not (t / "dora" / "__init__.py").is_file():
            ap.error(f"--tree {t}: no dora package there")
    runs = {k: v for k, v in RUNS.items() if not args.only or any(k.startswith(o) for o in args.only)}
    if not runs:
        ap.error(f"--only {args.only}: matches none of {', '.join(RUNS)}")
    digests = [digest(t, runs) for t in args.tree]
    if args.out:
        args.out.write_text(json.dumps(digests[0], indent=1, sort_keys=True) + "\n")
    if len(digests) == 1:
        return 0
    diff = differences(*digests)
    for line in diff:
        print(line)
    print(f"{len(runs)} runs: " + ("identical" if not diff else f"{len(diff)} differences"))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
