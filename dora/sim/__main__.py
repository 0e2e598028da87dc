"""python -m dora.sim: simulate scheduling policies on a length trace and compare them.

Examples:
  python -m dora.sim --trace traces/moe_longtail.parquet
  python -m dora.sim --trace traces/dense_math.parquet --policy dora --policy sync --eta 2 --json out.json
  python -m dora.sim --trace T.parquet --hardware H20 --model qwen2.5-32b --set policy.dora.migrate_kv=false
  python -m dora.sim sweep --grid cluster.instances=64,256 --policy dora --policy sync --out sweep.parquet
      (one tidy table over a grid of config values / trace shapes: see dora/sim/tools/sweep.py or `sweep --help`)
  python -m dora.sim calibrate out/exec/dora/profile.json --out cost.yaml   (fit the cost model to a real run)
  python -m dora.sim compare real_events.parquet sim_events.parquet         (real vs simulated metrics)
  python -m dora.sim tune --trace rec.parquet --cost cost.yaml --out tuned.yaml  (search dora's knobs)

Precedence of settings: built-in defaults < --hardware/--model preset < --config YAML <
--cost YAML < the flags < --set KEY=VALUE (dotted keys of SimConfig, e.g. cluster.max_seqs=128).
"""

from __future__ import annotations

import sys
import time

from dora.errors import cli_errors
from dora.eventlog import events_path, write_events
from dora.io import check_output
from dora.report import ROWS, add_ratios, table, write_json
from dora.sim.cli import parser, resolve_config
from dora.sim.run import check_fits, simulate
from dora.trace import load_trace


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:
        from dora.sim.tools.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] in (["calibrate"], ["compare"], ["tune"]):
        import importlib

        return importlib.import_module(f"dora.sim.tools.{argv[0]}").main(argv[1:])
    args = parser(__doc__).parse_args(argv)
    with cli_errors("dora.sim"):
        cfg = resolve_config(args)
        if args.json:
            check_output(args.json, ("json",), "--json", "runs.json")
        if args.events:
            check_output(args.events, ("parquet",), "--events", "events.parquet")
        if args.plot:
            from dora.plots import check_output as check_plot_output, plot_runs  # matplotlib: only when asked

            check_plot_output(args.plot)
        if args.perfetto:
            from dora.perfetto import check_output as check_perfetto_output, write_perfetto_runs

            check_perfetto_output(args.perfetto)
        trace = load_trace(cfg.trace)
        check_fits(cfg, trace)  # refuse before any output
        if cfg.cost.moe_imbalance_cv < 0 and "moe_imbalance_cv" not in trace.metadata.get("params", {}) \
                and not args.quiet:
            print(f"dora.sim: note: {trace.path} records no moe_imbalance_cv: instances run at equal speed "
                  "(set cost.moe_imbalance_cv to choose)", file=sys.stderr)
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
