"""Simulator scaling benchmark: simulated trajectories per wall second at 64 ... 4096 rollout instances.

Each (policy, instance count) runs in its own subprocess, so its peak memory (ru_maxrss of that
process) is its own. By default the work scales with the cluster: B = instances / 2 prompt groups
per step (1024 instances -> 512 groups x 16 samples, as in issue 3) and trainer_devices = instances.
Columns: wall = seconds inside simulate() (trace loading excluded); trajectories = `dispatch` rows
of the event log (every trajectory started, regenerated ones included); traj/s = trajectories / wall;
peak RSS = the subprocess's maximum resident set; peak before sim = the same just before simulate()
(imports and trace loading: when both are equal the run itself stayed below it); trained and
e2e samples/s come from the run's metrics; ref loop s = a fixed pure-Python loop timed just
before the run (this machine's speed at that moment: shared machines vary by 2x); CPU s = this
process's CPU time inside simulate() (wall s minus it is time the process waited for a core).
No timing is asserted anywhere; this only measures.

  python benchmarks/sim_scaling.py                       # 64, 256, 1024, 4096 instances, all policies
  python benchmarks/sim_scaling.py --quick               # CI: 64 and 256 instances, 2 steps
  python benchmarks/sim_scaling.py --policy dora --instances 1024 --steps 100 --out r.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dora.errors import InputError, cli_errors  # noqa: E402
from dora.sched.registry import names as policy_names  # noqa: E402

COLUMNS = ("policy", "instances", "batch", "steps", "trajectories", "wall_s", "cpu_s", "traj_per_s", "peak_rss_mib",
           "load_rss_mib", "trained_samples", "e2e_samples_per_s", "events", "ref_loop_s")
HEADERS = ("policy", "instances", "B x G", "steps", "trajectories", "wall s", "CPU s", "traj/s", "peak RSS MiB",
           "peak before sim MiB", "trained", "e2e samples/s", "sim events", "ref loop s")


def ref_loop_s() -> float:
    """Seconds for a fixed pure-Python loop (3M dict stores): how fast this machine runs Python
    right now. Shared and throttled machines vary; compare walls only at similar ref loop times."""
    t0 = time.perf_counter()
    d: dict[int, int] = {}
    for i in range(3_000_000):
        d[i & 1023] = i
    return time.perf_counter() - t0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="benchmarks/sim_scaling.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(REPO / "traces" / "moe_longtail.parquet"), help="trace parquet")
    ap.add_argument("--policy", action="append", help="policy (repeat; default: all five)")
    ap.add_argument("--instances", default="64,256,1024,4096", help="comma-separated instance counts")
    ap.add_argument("--steps", type=int, default=5, help="trainer steps per run (default 5)")
    ap.add_argument("--batch-size", type=int, help="prompt groups per step (default: instances / 2)")
    ap.add_argument("--trainer-devices", type=int, help="trainer devices (default: = instances)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="any other SimConfig key, as in python -m dora.sim")
    ap.add_argument("--quick", action="store_true", help="short CI version: 64 and 256 instances, 2 steps")
    ap.add_argument("--out", help="also write the rows here (.json or .csv)")
    ap.add_argument("--point", help=argparse.SUPPRESS)  # internal: run one point, print its JSON
    return ap


def point_config(trace: str, policy: str, instances: int, steps: int, batch: int, trainer: int, sets: list[str]):
    from dora.config import apply_cli, build
    from dora.sim.config import SimConfig

    data = {"trace": trace, "steps": steps, "policies": [policy],
            "cluster": {"instances": instances, "trainer_devices": trainer}, "policy": {"batch_size": batch}}
    return build(SimConfig, apply_cli(data, {}, sets))


def run_point(spec: dict) -> dict:
    """In the subprocess: one simulate(), timed; this process's peak RSS."""
    from dora.sim.run import simulate
    from dora.trace import load_trace

    cfg = point_config(**spec)
    trace = load_trace(cfg.trace)
    load_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    ref = ref_loop_s()
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(trace, cfg, spec["policy"], progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = int((r.events["event"].astype(str) == "dispatch").sum())
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"policy": spec["policy"], "instances": spec["instances"], "batch": f"{spec['batch']} x {trace.group_size}",
            "steps": spec["steps"], "trajectories": n, "wall_s": wall, "cpu_s": cpu, "traj_per_s": n / wall if wall > 0 else 0.0,
            "peak_rss_mib": rss_kib / 1024, "load_rss_mib": load_kib / 1024,
            "trained_samples": r.metrics["trained_samples"],
            "e2e_samples_per_s": r.metrics["e2e_samples_per_s"], "events": r.metrics["events"], "ref_loop_s": ref}


def spawn(spec: dict) -> dict:
    p = subprocess.run([sys.executable, __file__, "--point", json.dumps(spec)], capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{spec['policy']} at {spec['instances']} instances failed (exit {p.returncode}): {last}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def markdown(rows: list[dict]) -> str:
    fmt = {"wall_s": "{:.2f}", "cpu_s": "{:.2f}", "traj_per_s": "{:,.0f}", "peak_rss_mib": "{:,.0f}", "load_rss_mib": "{:,.0f}",
           "trajectories": "{:,}",
           "trained_samples": "{:,}", "e2e_samples_per_s": "{:.2f}", "events": "{:,}", "ref_loop_s": "{:.2f}"}
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "|".join("---" for _ in HEADERS) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt.get(c, "{}").format(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def write_rows(rows: list[dict], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix == ".json":
        tmp.write_text(json.dumps({"rows": rows}, indent=2))
    else:
        import pandas as pd

        pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp, index=False)
    tmp.replace(out)


def parse_instances(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--instances {text!r}: expected comma-separated integers, e.g. 64,256,1024") from None
    if not vals or min(vals) < 2:
        raise InputError(f"--instances {text!r}: give instance counts >= 2, e.g. 64,256,1024")
    return vals


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.point:
        print(json.dumps(run_point(json.loads(args.point))))
        return 0
    with cli_errors("sim_scaling"):
        if args.quick:
            args.instances, args.steps = "64,256", 2
        counts = parse_instances(args.instances)
        policies = args.policy or list(policy_names())
        if args.out and Path(args.out).suffix not in (".json", ".csv"):
            raise InputError(f"--out {args.out}: unknown type '{Path(args.out).suffix}'; use .json or .csv")
        specs = [{"trace": args.trace, "policy": p, "instances": n, "steps": args.steps,
                  "batch": args.batch_size or n // 2, "trainer": args.trainer_devices or n, "sets": args.set}
                 for n in counts for p in policies]
        from dora.sim.run import check_fits
        from dora.trace import load_trace

        trace = load_trace(args.trace)
        for s in specs:  # every point's config and fit checked before the first run
            check_fits(point_config(**s), trace)
        del trace
    rows, failed = [], []
    for k, s in enumerate(specs, 1):
        try:
            r = spawn(s)
        except RuntimeError as e:
            failed.append(str(e))
            print(f"[{k}/{len(specs)}] {e}", file=sys.stderr, flush=True)
            continue
        rows.append(r)
        print(f"[{k}/{len(specs)}] {r['policy']} {r['instances']} instances: {r['trajectories']:,} trajectories in "
              f"{r['wall_s']:.2f} s ({r['traj_per_s']:,.0f}/s), peak RSS {r['peak_rss_mib']:,.0f} MiB",
              file=sys.stderr, flush=True)
    print(f"trace {args.trace}, {args.steps} steps, B = {'instances / 2' if not args.batch_size else args.batch_size} "
          f"groups, trainer devices = {args.trainer_devices or 'instances'}\n")
    print(markdown(rows))
    if args.out:
        write_rows(rows, Path(args.out))
        print(f"wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
