"""python -m dora.trace {generate,stats} ..."""

from __future__ import annotations

import dataclasses
import json
import sys

from dora.config import build
from dora.errors import ArgumentParser, cli_errors
from dora.io import check_output
from dora.trace.generate import PRESETS, TraceParams, generate_to
from dora.trace.schema import load_trace
from dora.trace.stats import format_stats, trace_stats


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dora.trace", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write a long-tail trace parquet")
    g.add_argument("--preset", choices=sorted(PRESETS), help="start from a shipped preset")
    g.add_argument("--out", required=True, help="output parquet path")
    for f in dataclasses.fields(TraceParams):
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=None,
                       help=f"{f.type} (default: preset's or {f.default!r})")
    s = sub.add_parser("stats", help="print length percentiles, tail share, truncation share")
    s.add_argument("files", nargs="+")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = ap.parse_args(argv)
    with cli_errors("dora.trace"):
        if args.cmd == "generate":
            base = dataclasses.asdict(PRESETS[args.preset]) if args.preset else {}
            for f in dataclasses.fields(TraceParams):
                v = getattr(args, f.name)
                if v is not None:
                    base[f.name] = v
            params = build(TraceParams, base)
            check_output(args.out, ("parquet",), "--out", "trace.parquet")
            generate_to(args.out, params)
            print(format_stats(args.out, trace_stats(load_trace(args.out))))
        else:
            all_stats = {}
            for path in args.files:
                st = trace_stats(load_trace(path))
                all_stats[path] = st
                if not args.json:
                    print(format_stats(path, st))
            if args.json:
                json.dump(all_stats, sys.stdout, indent=2)
                print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
