"""python -m dora.sim: simulate scheduling policies on a length trace and compare them.

Examples:
  python -m dora.sim --trace traces/moe_longtail.parquet
  python -m dora.sim --trace traces/dense_math.parquet --policy dora --policy sync --eta 2 --json out.json
  python -m dora.sim --trace T.parquet --hardware H20 --model qwen2.5-32b --set policy.dora.migrate_kv=false
  python -m dora.sim sweep --grid cluster.instances=64,256 --policy dora --policy sync --out sweep.parquet
      (one tidy table over a grid of config values / trace shapes: see dora/sim/sweep.py or `sweep --help`)
  python -m dora.sim calibrate out/exec/dora/profile.json --out cost.yaml   (fit the cost model to a real run)
  python -m dora.sim compare real_events.parquet sim_events.parquet         (real vs simulated metrics)
  python -m dora.sim tune --trace rec.parquet --cost cost.yaml --out tuned.yaml  (search dora's knobs)

Precedence of settings: built-in defaults < --hardware/--model preset < --config YAML <
--cost YAML < the flags < --set KEY=VALUE (dotted keys of SimConfig, e.g. cluster.max_seqs=128).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dora.config import apply_cli, build, deep_merge, load_yaml, to_dict
from dora.errors import ArgumentParser, InputError, cli_errors
from dora.eventlog import events_path, write_events
from dora.sim.config import POLICY_NAMES, SimConfig
from dora.sim.presets import HARDWARE, MODELS, derive
from dora.report import ROWS, add_ratios, table, write_json
from dora.sim.run import check_fits, simulate
from dora.trace import load_trace


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", help="trace parquet (default: traces/moe_longtail.parquet)")
    ap.add_argument("--policy", action="append", choices=POLICY_NAMES,
                    help="policy to run (repeat for several; default: all five)")
    ap.add_argument("--config", help="YAML file with SimConfig keys (trace, steps, cluster, cost, policy, ...)")
    ap.add_argument("--cost", help="YAML file of cost-model coefficients (e.g. from calibration)")
    ap.add_argument("--hardware", help=f"hardware preset: {', '.join(HARDWARE)}")
    ap.add_argument("--model", help=f"model preset: {', '.join(MODELS)}")
    ap.add_argument("--instances", type=int, help="rollout instances")
    ap.add_argument("--devices-per-instance", type=int, help="devices per rollout instance (TP/EP degree)")
    ap.add_argument("--max-seqs", type=int, help="decode slots per instance")
    ap.add_argument("--trainer-devices", type=int, help="trainer devices")
    ap.add_argument("--steps", type=int, help="trainer steps to simulate")
    ap.add_argument("--batch-size", type=int, help="prompt groups per trainer step (B)")
    ap.add_argument("--eta", type=int, help="staleness bound η")
    ap.add_argument("--seed", type=int, help="seed of the MoE imbalance draws")
    ap.add_argument("--reference", action="store_true", help="one event per decode step (slow, for checking)")
    ap.add_argument("--mtbf-s", type=float,
                    help="instance failures: mean time between failures per rollout instance, simulated s")
    ap.add_argument("--repair-s", type=float, help="failed instance back after this many simulated s (default 600)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any config key")
    ap.add_argument("--json", metavar="OUT", help="write {runs: [{policy, config, metrics}]} here")
    ap.add_argument("--events", metavar="OUT.parquet",
                    help="write the event log here (with several policies: OUT.<policy>.parquet)")
    ap.add_argument("--plot", metavar="OUT.png",
                    help="timeline PNG (with several policies: OUT.<policy>.png timelines + OUT.png bubble bars)")
    ap.add_argument("--perfetto", metavar="OUT.json",
                    help="Chrome/Perfetto trace-event JSON of the event log (several policies: OUT.<policy>.json)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap



def resolve_config(args: argparse.Namespace) -> SimConfig:
    data: dict = {}
    if args.hardware or args.model:
        if not (args.hardware and args.model):
            raise InputError("--hardware and --model go together: name both (e.g. --hardware H800 --model qwen2.5-7b)")
        cost, hints = derive(args.hardware, args.model, args.devices_per_instance or 0)
        data["cost"] = to_dict(cost)
        data["cluster"] = {"devices_per_instance": hints["devices_per_instance"], "kv_tokens": hints["kv_tokens"]}
    if args.config:
        data = deep_merge(data, load_yaml(args.config))
    if args.cost:
        data.setdefault("cost", {}).update(load_yaml(args.cost))
    flags = {
        ("trace",): args.trace, ("steps",): args.steps, ("seed",): args.seed,
        ("cluster", "instances"): args.instances, ("cluster", "devices_per_instance"): args.devices_per_instance,
        ("cluster", "max_seqs"): args.max_seqs, ("cluster", "trainer_devices"): args.trainer_devices,
        ("policy", "eta"): args.eta, ("policy", "batch_size"): args.batch_size,
        ("faults", "mtbf_s"): args.mtbf_s, ("faults", "repair_s"): args.repair_s,
    }
    if args.policy:
        data["policies"] = args.policy
    if args.reference:
        data["reference"] = True
    return build(SimConfig, apply_cli(data, flags, args.set))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:
        from dora.sim.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] in (["calibrate"], ["compare"], ["tune"]):
        import importlib

        return importlib.import_module(f"dora.sim.{argv[0]}").main(argv[1:])
    args = parser().parse_args(argv)
    with cli_errors("dora.sim"):
        cfg = resolve_config(args)
        for out in (args.json, args.events):
            if out and Path(out).is_dir():
                raise InputError(f"output {out}: is a directory; give a file path")
        if args.plot:
            from dora.plots import check_output as check_plot_output, plot_runs  # matplotlib: only when asked

            check_plot_output(args.plot)
        if args.perfetto:
            from dora.perfetto import check_output as check_perfetto_output, write_perfetto_runs

            check_perfetto_output(args.perfetto)
        trace = load_trace(cfg.trace)
        check_fits(cfg, trace)  # refuse before any output
        runs, frames = [], {}
        t0 = time.perf_counter()
        for name in cfg.policies:
            if not args.quiet:
                print(f"simulating {name} ...", file=sys.stderr, flush=True)
            r = simulate(trace, cfg, name, progress=not args.quiet)
            runs.append({"policy": r.policy, "config": r.config, "metrics": r.metrics})
            frames[name] = r.events
        add_ratios(runs)
        c = cfg.cluster
        title = (f"{trace.path}: {c.instances} rollout instances x {c.devices_per_instance} devices "
                 f"({c.max_seqs} slots each), {c.trainer_devices} trainer devices; B={cfg.policy.batch_size} "
                 f"groups x G={trace.group_size}, eta={cfg.policy.eta}, {cfg.steps} steps; "
                 f"bubble-free bound {runs[0]['metrics']['bound_samples_per_s']:.3f} samples/s")
        faulty = any(r["metrics"].get("instance_failures") for r in runs)
        print(table(runs, title, ROWS + (("instance_failures", "instances_failed") if faulty else ())))
        print(f"({time.perf_counter() - t0:.1f} s wall)", file=sys.stderr)
        if args.json:
            write_json(runs, args.json)
        if args.events:
            for name, df in frames.items():
                write_events(df, events_path(args.events, name, len(frames) > 1))
        if args.plot:
            for p in plot_runs(frames, args.plot):
                print(f"wrote {p}", file=sys.stderr)
        if args.perfetto:
            for p in write_perfetto_runs(frames, args.perfetto):
                print(f"wrote {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
