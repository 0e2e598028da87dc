"""Time the timeline of a large event log (the issue asks for <= 15 s at 1024 instances, 10 steps).

  python benchmarks/plot_timeline.py                      # simulate the log first (a few minutes)
  python benchmarks/plot_timeline.py EVENTS.parquet --out /tmp/timeline_1024.png [--perfetto T.json]

Without EVENTS.parquet it runs `dora` on traces/moe_longtail.parquet with 1024 instances,
B = 512 groups and 10 steps (as `python -m dora.sim --instances 1024 --set policy.batch_size=512
--steps 10 --policy dora --events ...`) and keeps the log at --log (default
/tmp/dora_bench_1024.parquet, reused when present). Prints the seconds of each phase.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dora.errors import cli_errors
from dora.eventlog import read_events, write_events


def make_log(path: Path, trace: str) -> None:
    from dora.config import build
    from dora.sim.config import SimConfig
    from dora.sim.run import simulate
    from dora.trace import load_trace

    cfg = build(SimConfig, {"trace": trace, "steps": 10, "policies": ["dora"], "cluster": {"instances": 1024},
                            "policy": {"batch_size": 512}})
    print(f"simulating dora, 1024 instances, 10 steps on {trace} -> {path} ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    r = simulate(load_trace(trace), cfg, "dora", progress=True)
    write_events(r.events, path)
    print(f"simulated in {time.perf_counter() - t:.1f} s", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("events", nargs="?", help="event log parquet (default: simulate one)")
    ap.add_argument("--log", default="/tmp/dora_bench_1024.parquet", help="where the simulated log is kept")
    ap.add_argument("--trace", default="traces/moe_longtail.parquet")
    ap.add_argument("--out", default="/tmp/timeline_1024.png")
    ap.add_argument("--perfetto", help="also time the trace-event export to this JSON")
    ap.add_argument("--repeat", type=int, default=1, help="time the timeline this many times")
    args = ap.parse_args(argv)
    with cli_errors("plot_timeline"):
        from dora.plots import save, timeline

        path = Path(args.events or args.log)
        if args.events is None and not path.is_file():
            make_log(path, args.trace)
        t = time.perf_counter()
        df = read_events(path)
        t_read = time.perf_counter() - t
        run = df.attrs.get("run", {})
        print(f"log {path}: {len(df):,} rows, {run.get('instances', '?')} instances, policy {run.get('policy', '?')}, "
              f"{run.get('steps', '?')} steps; read {t_read:.2f} s")
        for k in range(args.repeat):
            t = time.perf_counter()
            fig = timeline(df)
            t_fig = time.perf_counter() - t
            out = save(fig, args.out)
            t_all = time.perf_counter() - t
            print(f"timeline: figure {t_fig:.2f} s, figure + PNG {t_all:.2f} s, read + figure + PNG "
                  f"{t_all + t_read:.2f} s -> {out}")
        if args.perfetto:
            from dora.perfetto import write_perfetto
            t = time.perf_counter()
            p = write_perfetto(df, args.perfetto)
            print(f"perfetto: {time.perf_counter() - t:.2f} s -> {p} ({p.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
