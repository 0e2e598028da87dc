"""python -m dora.plots: figures from event logs, traces and sweep tables.

Examples:
  python -m dora.sim --policy sync --policy dora --steps 6 --events /tmp/ev.parquet
  python -m dora.plots timeline /tmp/ev.dora.parquet --out timeline.png
  python -m dora.plots timeline /tmp/ev.dora.parquet --window 100 300 --out zoom.png
  python -m dora.plots timeline /tmp/ev.sync.parquet /tmp/ev.dora.parquet --step 3 --out step3.png
  python -m dora.plots bubbles /tmp/ev.sync.parquet /tmp/ev.dora.parquet --out bubbles.png
  python -m dora.plots slots /tmp/ev.sync.parquet /tmp/ev.dora.parquet --out slots.png
  python -m dora.plots staleness /tmp/ev.*.parquet --out staleness.png
  python -m dora.plots lengths traces/moe_longtail.parquet --out lengths.png
  python -m dora.plots sweep runs_*.json --x cluster.instances --out sweep.png
  python -m dora.plots perfetto /tmp/ev.dora.parquet --out trace.json   (open in ui.perfetto.dev)

With several event logs, `timeline` writes one figure per log: OUT.<policy>.png.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from dora.errors import ArgumentParser, InputError, cli_errors, too_small
from dora.eventlog import read_events
from dora.limits import check_memory


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.plots", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="kind", required=True, metavar="{timeline,bubbles,slots,staleness,lengths,sweep,perfetto}")
    helps = {
        "timeline": ("EVENTS.parquet", "instances x time, coloured by policy version"),
        "bubbles": ("EVENTS.parquet", "where the device-seconds go, one stacked bar per log"),
        "slots": ("EVENTS.parquet", "where the decode slots go: instance-time by state and occupancy, one bar per log"),
        "staleness": ("EVENTS.parquet", "staleness histogram, one series per log"),
        "lengths": ("TRACE.parquet", "response-length CDF and tail of traces"),
        "sweep": ("TABLE", "throughput against a swept field (.parquet/.csv table or dora.sim --json files)"),
        "perfetto": ("EVENTS.parquet", "trace-event JSON for ui.perfetto.dev / chrome://tracing"),
    }
    for name, (meta, text) in helps.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("inputs", nargs="+", metavar=meta)
        p.add_argument("--out", required=True, help="output file (.png, .svg or .pdf; .json for perfetto)")
        p.add_argument("--title", help="figure title")
        if name == "timeline":
            p.add_argument("--window", nargs=2, type=float, metavar=("T0", "T1"), help="zoom to [T0, T1] seconds")
            p.add_argument("--step", type=int, help="zoom to trainer step K (publication of version K-1 to K)")
            p.add_argument("--bins", type=int, default=800, help="time bins across the window (default 800)")
            p.add_argument("--max-rows", type=int, default=128,
                           help="rows before instances are grouped into bands (default 128)")
        if name == "sweep":
            p.add_argument("--x", help="swept column (default: the one non-metric column that varies)")
            p.add_argument("--y", default="e2e_samples_per_s", help="metric column (default e2e_samples_per_s)")
    return ap


def _logs(paths: list[str]) -> dict:
    """Label -> event log: the run's policy; where a policy repeats, every log of it also gets its
    file's name (without the `.<policy>` that `--events X.parquet` adds to X: `dora (X)`)."""
    read = []
    for p in paths:
        df = read_events(p)
        name = str(df.attrs.get("run", {}).get("policy") or Path(p).stem)
        stem = Path(p).stem.removesuffix(f".{name}") or Path(p).stem
        read.append((name, stem, df))
    names = [n for n, _, _ in read]
    out = {}
    for name, stem, df in read:
        key = name if names.count(name) == 1 else f"{name} ({stem})"
        out[key if key not in out else f"{key} #{len(out)}"] = df
    return out


def run(args: argparse.Namespace) -> list[Path]:
    from dora import plots
    from dora.perfetto import write_perfetto
    from dora.plots.style import IMAGE_TYPES

    out = plots.check_output(args.out, ("json",) if args.kind == "perfetto" else IMAGE_TYPES)
    if args.kind == "perfetto":
        if len(args.inputs) != 1:
            raise InputError("perfetto: give one event log (one trace file per run)")
        return [write_perfetto(read_events(args.inputs[0]), out)]
    if args.kind == "timeline":
        for flag, n in (("--bins", args.bins), ("--max-rows", args.max_rows)):
            if n < 1:
                raise too_small(f"timeline: {flag}", n, 1)
        if args.window and not all(math.isfinite(t) for t in args.window):
            raise InputError(f"timeline: --window {args.window[0]:g} {args.window[1]:g}: give finite seconds T0 < T1")
        check_memory(f"timeline of {args.bins:,} bins", 64.0 * args.bins * (args.max_rows + 2),
                     "lower --bins (a figure shows at most a few thousand)")
        logs = _logs(args.inputs)
        kw = dict(window=tuple(args.window) if args.window else None, step=args.step, bins=args.bins,
                  max_rows=args.max_rows, title=args.title)
        if len(logs) == 1:
            return [plots.save(plots.timeline(next(iter(logs.values())), **kw), out)]
        return [plots.save(plots.timeline(df, **kw), out.with_name(f"{out.stem}.{name.split(' ')[0]}{out.suffix}"))
                for name, df in logs.items()]
    if args.kind == "bubbles":
        return [plots.save(plots.bubbles(_logs(args.inputs), title=args.title), out)]
    if args.kind == "slots":
        return [plots.save(plots.slots(_logs(args.inputs), title=args.title), out)]
    if args.kind == "staleness":
        return [plots.save(plots.staleness_hist(_logs(args.inputs), title=args.title), out)]
    if args.kind == "lengths":
        return [plots.save(plots.length_cdf(args.inputs, title=args.title), out)]
    if args.kind == "sweep":
        return [plots.save(plots.sweep_plot(plots.read_sweep(args.inputs), x=args.x, y=args.y, title=args.title), out)]
    raise InputError(f"unknown plot {args.kind!r}; choose timeline, bubbles, slots, staleness, lengths, sweep or perfetto")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("dora.plots"):
        for p in run(args):
            print(f"wrote {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
