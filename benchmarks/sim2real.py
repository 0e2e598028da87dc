"""Sim-to-real check: calibrate on one real run, predict a fresh real run in the simulator, compare.

  # 1. real runs (one per policy; --profile-out/--events/--trace-out/--json), a calibration seed and a fresh one:
  for S in 0 1; do for P in sync one_step partial laminar dora; do
    python -m dora.exec --model M --policy $P --steps 12 --seed $S --set trainer.threads=1 --out R$S \\
      --json R$S/$P.json --events R$S/ev.$P.parquet --trace-out R$S/rec.$P.parquet; done; done
  # 2. this script: calibrate on R0, predict R1 per policy (from R0's lengths), compare
  python benchmarks/sim2real.py --calib R0 --fresh R1 --out S2R [--pooled]

For each policy: `python -m dora.sim calibrate R0/<policy>/profile.json --out S2R/cost.<policy>.yaml`
(with --pooled: one cost file from every policy's profile), then `python -m dora.sim --trace
R0/rec.<policy>.parquet --cost ... --policy <policy>` — a prediction of the fresh run from the
calibration run's lengths, not the fresh run's own (`--lengths fresh` replays the fresh run's recorded
lengths instead: timing given the lengths, a diagnosis) — on the real run's cluster shape (its instances,
slots, one trainer device, B, eta, steps; sync disaggregated; dora's migrations re-prefill, as the
executor's do), then `python -m dora.sim compare R1/ev.<policy>.parquet S2R/sim.<policy>.parquet`.
Prints each command it runs and the table of relative errors, with the run-to-run floor (the
calibration run's own metrics taken as the prediction of the fresh run) and a host-speed probe (median engine
step time with <= 2 running sequences, calibration vs fresh run: on a shared machine the same step
takes longer while other jobs run); writes S2R/sim2real.json and copies each fresh real event log to
S2R/real.<policy>.parquet next to its replay S2R/sim.<policy>.parquet (notebooks/d_sim_vs_real.ipynb
reads that folder).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HOST_SCALED = ("decode_base_s", "decode_per_seq_s", "decode_per_ctx_token_s", "prefill_per_token_s")


def small_batch_step_s(profile_paths: list[str]) -> float:
    """Median engine step time with at most 2 running sequences: a probe of how fast the host was
    (on a shared machine the same step takes longer when other jobs run)."""
    import numpy as np

    from dora.profile import read_profile

    dts = []
    for p in profile_paths:
        d = read_profile(p)["decode_steps"]
        dts += [dt for dt, r in zip(d["dt_s"], d["running"]) if dt > 0 and 0 < r <= 2]
    return float(np.median(dts)) if dts else float("nan")


def _pct(e: float | None) -> str:
    return "n/a" if e is None else f"{e:+.1%}"


def replay_args(run: dict, trace: Path, cost: Path, policy: str, events: Path) -> list[str]:
    """dora.sim flags that put the real run's cluster and run length around its recorded trace."""
    c = run["config"]
    kv = int(c["rollout"]["max_model_len"]) * int(c["max_seqs"])
    return ["--trace", str(trace), "--cost", str(cost), "--policy", policy, "--instances", str(c["instances"]),
            "--devices-per-instance", "1", "--max-seqs", str(c["max_seqs"]), "--trainer-devices", "1",
            "--batch-size", str(c["batch_size"]), "--eta", str(c["eta"]), "--steps", str(c["steps"]),
            "--set", f"cluster.kv_tokens={kv}", "--set", "policy.sync.colocated=false",
            "--set", "policy.dora.migrate_kv=false", "--events", str(events), "--quiet"]


def main(argv: list[str] | None = None) -> int:
    from dora.sched.registry import names

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calib", required=True, help="directory of the calibration runs (--out of dora.exec; their "
                    "rec.<policy>.parquet, --trace-out, hold the lengths a prediction runs on)")
    ap.add_argument("--fresh", required=True, help="directory of the fresh runs (their --events/--trace-out/--json)")
    ap.add_argument("--out", required=True, help="directory for cost files, sim event logs and sim2real.json")
    ap.add_argument("--policy", action="append", choices=names(), help="policies (default: every registered one)")
    ap.add_argument("--pooled", action="store_true", help="one cost file from every policy's calibration profile")
    ap.add_argument("--calib-profile", action="append", metavar="PROFILE",
                    help="calibrate every policy on these profiles instead (e.g. --calib-profile R1/sync/profile.json "
                         "for an in-sample check of the model's structure, which is not a prediction)")
    ap.add_argument("--host-cores", type=float, default=0.0, metavar="N",
                    help="calibrate with --host-cores N (the engines and the trainer shared N cores)")
    ap.add_argument("--lengths", choices=("calib", "fresh"), default="calib",
                    help="whose recorded lengths the simulator runs: the calibration run's (default: a "
                         "prediction of a run it has not seen) or the fresh run's own (timing given the lengths)")
    ap.add_argument("--plot", metavar="OUT.png", help="bars of real vs simulated step time and throughput")
    ap.add_argument("--host-adjust", action="store_true",
                    help="diagnosis, not a prediction: scale the decode/prefill terms by the host probe's "
                         "fresh/calibration ratio (a number measured on the fresh run)")
    args = ap.parse_args(argv)
    from dora.sim.__main__ import main as sim
    from dora.sim.tools.compare import HEADLINE, compare_files

    calib, fresh, out = Path(args.calib), Path(args.fresh), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = args.policy or list(names())
    if args.pooled or args.calib_profile:
        pooled = out / "cost.pooled.yaml"
        profs = args.calib_profile or [str(calib / p / "profile.json") for p in policies]
        cmd = ["calibrate", *profs, "--out", str(pooled), "--host-cores", str(args.host_cores)]
        print("python -m dora.sim " + " ".join(cmd), flush=True)
        if sim(cmd) != 0:
            return 1
    rows = {}
    for p in policies:
        cost = pooled if args.pooled or args.calib_profile else out / f"cost.{p}.yaml"
        if not (args.pooled or args.calib_profile):
            cmd = ["calibrate", str(calib / p / "profile.json"), "--out", str(cost), "--host-cores", str(args.host_cores)]
            print("python -m dora.sim " + " ".join(cmd), flush=True)
            if sim(cmd) != 0:
                return 1
        cal = args.calib_profile or ([str(calib / q / "profile.json") for q in policies] if args.pooled
                                     else [str(calib / p / "profile.json")])
        probe = {"calib": small_batch_step_s(cal), "fresh": small_batch_step_s([str(fresh / p / "profile.json")])}
        if args.host_adjust:  # diagnosis: what the error is once the host's speed drift is taken out
            import yaml

            k = probe["fresh"] / probe["calib"]
            data = yaml.safe_load(Path(cost).read_text())
            for key in HOST_SCALED:
                data[key] *= k
            cost = out / f"cost.{p}.host_adjusted.yaml"
            cost.write_text(f"# {cost.name}: decode and prefill terms x {k:.3f} (host probe fresh/calib)\n"
                            + yaml.safe_dump(data, sort_keys=False))
        run = json.loads((fresh / f"{p}.json").read_text())["runs"][0]
        sim_ev = out / f"sim.{p}.parquet"
        lengths = (calib if args.lengths == "calib" else fresh) / f"rec.{p}.parquet"
        cmd = replay_args(run, lengths, cost, p, sim_ev)
        print("python -m dora.sim " + " ".join(cmd), flush=True)
        if sim(cmd) != 0:
            return 1
        print(f"python -m dora.sim compare {fresh / f'ev.{p}.parquet'} {sim_ev}", flush=True)
        rows[p] = compare_files(fresh / f"ev.{p}.parquet", sim_ev)
        rows[p]["host_probe_s"] = probe
        # the run-to-run floor: the calibration run's own metrics taken as the prediction of the fresh run
        rows[p]["calib_run_err"] = compare_files(fresh / f"ev.{p}.parquet", calib / f"ev.{p}.parquet")["rel_err"]
        rows[p]["lengths_from"] = args.lengths
        shutil.copyfile(fresh / f"ev.{p}.parquet", out / f"real.{p}.parquet")  # the folder is self-contained
        rows[p]["files"] = {"real": f"real.{p}.parquet", "sim": sim_ev.name, "cost": Path(cost).name,
                            "real_from": str(fresh / f"ev.{p}.parquet")}
    print()
    lines = [f"{'policy':<9} " + " | ".join(f"{k:^27}" for k in HEADLINE) + " | host probe s (calib/fresh)",
             f"{'':<9} " + " | ".join(f"{'real':>8} {'sim':>8} {'err':>9}" for _ in HEADLINE)]
    for p, r in rows.items():
        cells = []
        for k in HEADLINE:
            e = r["rel_err"][k]
            cells.append(f"{r['real'][k]:>8.3f} {r['sim'][k]:>8.3f} {'n/a' if e is None else f'{e:+.1%}':>9}")
        h = r["host_probe_s"]
        cells.append(f"{h['calib']:.4f} / {h['fresh']:.4f}")
        lines.append(f"{p:<9} " + " | ".join(cells))
    print("\n".join(lines))
    md = ["| policy | " + " | ".join(f"{k} real / sim (err)" for k in HEADLINE)
          + " | calibration run as the prediction (err, same columns) | host probe s calib / fresh |",
          "|---|" + "---|" * (len(HEADLINE) + 2)]
    for p, r in rows.items():
        cells = [f"{r['real'][k]:.3f} / {r['sim'][k]:.3f} ({_pct(r['rel_err'][k])})" for k in HEADLINE]
        floor = " / ".join(_pct(r["calib_run_err"][k]) for k in HEADLINE)
        h = r["host_probe_s"]
        md.append(f"| {p} | " + " | ".join(cells) + f" | {floor} | {h['calib']:.4f} / {h['fresh']:.4f} |")
    (out / "sim2real.md").write_text("\n".join(md) + "\n")
    print("\n" + "\n".join(md))
    (out / "sim2real.json").write_text(json.dumps(rows, indent=2, default=float))
    if args.plot:
        from dora.plots import save
        from dora.plots.sim_vs_real import sim_vs_real

        print(f"wrote {save(sim_vs_real(rows), args.plot)}", file=sys.stderr)
    print(f"wrote {out / 'sim2real.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
