"""The body of `python -m dora.sim` and `plan`: resolve and check the request, search each
policy's split (`--gpus`), run every policy, print the table and the verdict line, and write
the outputs asked for."""

from __future__ import annotations

import argparse
import sys
import time

from dora.errors import InputError
from dora.eventlog import events_path, write_events
from dora.io import check_output
from dora.report import ROWS, add_ratios, table, write_json
from dora.parallel import check_jobs
from dora.sim import memory, sensitivity
from dora.sim.cli import resolve_config
from dora.sim.config import SimConfig
from dora.sim.run import check_fits, replay_warning, simulate
from dora.sim.split import config_for, search, search_table
from dora.trace import Trace, load_trace
from dora.verdict import ranked, verdict


def run_command(args: argparse.Namespace, show_search: bool = False) -> None:
    """Everything a `python -m dora.sim` (or `plan`, `show_search`) command does after parsing."""
    cfg = resolve_config(args)
    check_request(args)  # before any work
    trace = load_trace(cfg.trace)
    cfg, sizing = memory.resolve(cfg, trace)
    check_fits(cfg, trace)  # refuse before any output
    jobs = check_jobs(args.jobs)
    best, rows = None, None
    if args.gpus is not None:
        best, rows = search(cfg, trace, args.gpus, args.splits, jobs, args.ray_address, args.quiet)
        if show_search:
            print(search_table(rows, args.gpus, cfg.cluster.devices_per_instance))
    run_table(args, cfg, trace, best, rows, jobs, sizing)


def check_request(args: argparse.Namespace) -> None:
    """Before any work starts: the sensitivity share is a share, and every output path asked for
    can be written."""
    if not 0 <= args.sensitivity < 1:
        raise InputError(f"--sensitivity {args.sensitivity}: must be in [0, 1) (a share, e.g. 0.2 for +/-20%; "
                         "0 skips the pass)")
    if args.json:
        check_output(args.json, ("json",), "--json", "runs.json")
    if args.events:
        check_output(args.events, ("parquet",), "--events", "events.parquet")
    if args.plot:
        from dora.plots import check_output as check_plot_output  # matplotlib: only when asked

        check_plot_output(args.plot)
    if args.perfetto:
        from dora.perfetto import check_output as check_perfetto_output

        check_perfetto_output(args.perfetto)


def run_table(args: argparse.Namespace, cfg: SimConfig, trace: Trace, best: dict | None, rows: list[dict] | None,
              jobs: int, sizing: str | None = None) -> None:
    """Simulate every policy (at its own split with --gpus), print the table and the verdict, write
    the outputs asked for."""
    if args.plot:
        from dora.plots import plot_runs  # matplotlib: only when asked
    if args.perfetto:
        from dora.perfetto import write_perfetto_runs
    warning = replay_warning(trace, cfg)
    if warning:
        print(warning, file=sys.stderr)
    if cfg.cost.moe_imbalance_cv < 0 and "moe_imbalance_cv" not in trace.metadata.get("params", {}) \
            and not args.quiet:
        print(f"dora.sim: note: {trace.path} records no moe_imbalance_cv: instances run at equal speed "
              "(set cost.moe_imbalance_cv to choose)", file=sys.stderr)
    cfgs = {name: cfg if best is None else config_for(cfg, best[name]) for name in cfg.policies}
    runs, frames = [], {}
    t0 = time.perf_counter()
    for name in cfg.policies:
        if not args.quiet:
            print(f"simulating {name} ...", file=sys.stderr, flush=True)
        r = simulate(trace, cfgs[name], name, progress=not args.quiet)
        runs.append({"policy": r.policy, "config": r.config, "metrics": r.metrics})
        frames[name] = r.events
    add_ratios(runs)
    c, dpi = cfg.cluster, cfg.cluster.devices_per_instance
    shape = (f"{c.instances} rollout instances x {dpi} devices ({c.max_seqs} slots each), {c.trainer_devices} "
             f"trainer devices" if best is None else
             f"{args.gpus} devices ({dpi} per rollout instance, {c.max_seqs} slots each), each policy at its best "
             f"split: " + "; ".join(f"{n} {best[n].label(dpi)}" for n in cfg.policies))
    bound = f"; bubble-free bound {runs[0]['metrics']['bound_samples_per_s']:.3f} samples/s" if best is None else ""
    title = (f"{trace.path}: {shape}; B={cfg.policy.batch_size} groups x G={trace.group_size}, eta={cfg.policy.eta}, "
             f"{cfg.steps} steps{bound}")
    faulty = any(r["metrics"].get("instance_failures") for r in runs)
    if sizing:
        print(sizing)
    print(table(runs, title, ROWS + (("instance_failures", "instances_failed") if faulty else ())))
    v = verdict(runs)
    order = [r["policy"] for r in ranked(runs)]
    if args.sensitivity > 0 and len(order) > 1:
        v.sensitivity = sensitivity.check({p: cfgs[p] for p in order}, order[0], args.sensitivity, jobs,
                                          args.ray_address, quiet=args.quiet)
    print(v.line())
    print(f"({time.perf_counter() - t0:.1f} s wall)", file=sys.stderr)
    if args.json:
        search = None if rows is None else [{k: r[k] for k in r if k != "metrics"} for r in rows]
        write_json(runs, args.json, verdict=v.to_dict(), **({} if search is None else {"search": search}))
    if args.events:
        for name, df in frames.items():
            write_events(df, events_path(args.events, name, len(frames) > 1))
    if args.plot:
        for p in plot_runs(frames, args.plot):
            print(f"wrote {p}", file=sys.stderr)
    if args.perfetto:
        for p in write_perfetto_runs(frames, args.perfetto):
            print(f"wrote {p}", file=sys.stderr)
