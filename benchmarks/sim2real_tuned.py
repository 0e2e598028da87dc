"""Did the simulator's tuned dora config carry over? Replay real dora runs (default and tuned) and compare.

  python -m dora.sim tune --trace CALIB/rec.dora.parquet --cost S2R/cost.dora.yaml ... --eta-max 4 --out tuned.yaml
  python -m dora.exec ... --policy dora --seed 2 [--policy-config tuned.yaml] --out RUN --json RUN/dora.json \\
      --events RUN/ev.dora.parquet --trace-out RUN/rec.dora.parquet          # one RUN dir per run
  python benchmarks/sim2real_tuned.py --cost S2R/cost.dora.yaml --default RUN_D1 RUN_D2 --tuned RUN_T1 RUN_T2 --out DIR

Each real run is replayed in the simulator with its own dora config (eta and knobs, read from its
--json), on its recorded lengths, with the calibrated cost; prints real and simulated e2e_samples_per_s
and step time per run, and the tuned/default throughput ratio measured and predicted, with each run's host probe (median engine
step with <= 2 running sequences, as in sim2real.py); writes DIR/tuned.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim2real import replay_args, small_batch_step_s  # noqa: E402

KNOBS = ("repartition_load", "spread_tails", "consolidate", "migrate_kv", "predictor",
         "versions_per_instance", "max_regenerations")


def replay(run_dir: Path, cost: Path, out: Path) -> dict:
    from dora.sim.__main__ import main as sim
    from dora.sim.tools.compare import compare_files

    run = json.loads((run_dir / "dora.json").read_text())["runs"][0]
    pol = run["config"]["policy"]
    sim_ev = out / f"sim.{run_dir.name}.parquet"
    cmd = replay_args(run, run_dir / "rec.dora.parquet", cost, "dora", sim_ev)
    for k in KNOBS:
        cmd += ["--set", f"policy.dora.{k}={pol[k]}"]
    print("python -m dora.sim " + " ".join(cmd), flush=True)
    if sim(cmd) != 0:
        raise SystemExit(1)
    r = compare_files(run_dir / "ev.dora.parquet", sim_ev)
    r["config"] = {"eta": pol["eta"], **{k: pol[k] for k in KNOBS}}
    r["host_probe_s"] = small_batch_step_s([str(run_dir / "dora" / "profile.json")])
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cost", required=True, type=Path, help="calibrated cost file (python -m dora.sim calibrate)")
    ap.add_argument("--default", nargs="+", required=True, type=Path, help="run dirs of the default dora config")
    ap.add_argument("--tuned", nargs="+", required=True, type=Path, help="run dirs of the tuned dora config")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {"default": {d.name: replay(d, args.cost, args.out) for d in args.default},
            "tuned": {d.name: replay(d, args.cost, args.out) for d in args.tuned}}
    print(f"\n{'config':<8} {'run':<16} {'e2e real':>9} {'e2e sim':>8} {'err':>7} {'step real':>9} {'step sim':>8} {'err':>7} {'probe s':>8}")
    mean = {}
    for kind, runs in rows.items():
        for name, r in runs.items():
            e, s = "e2e_samples_per_s", "step_time_mean_s"
            print(f"{kind:<8} {name:<16} {r['real'][e]:>9.2f} {r['sim'][e]:>8.2f} {r['rel_err'][e]:>+7.1%} "
                  f"{r['real'][s]:>9.3f} {r['sim'][s]:>8.3f} {r['rel_err'][s]:>+7.1%} {r['host_probe_s']:>8.4f}")
        mean[kind] = {w: sum(r[w]["e2e_samples_per_s"] for r in runs.values()) / len(runs) for w in ("real", "sim")}
    ratio = {w: mean["tuned"][w] / mean["default"][w] for w in ("real", "sim")}
    print(f"\ntuned / default e2e_samples_per_s (mean over runs): real {ratio['real']:.2f}x, simulated {ratio['sim']:.2f}x")
    (args.out / "tuned.json").write_text(json.dumps({"runs": rows, "mean_e2e": mean, "ratio": ratio}, indent=2,
                                                     default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
