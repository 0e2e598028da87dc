"""python -m dora.trace {generate,import,stats} ...

  generate  write a long-tail trace parquet from a preset or parameters
  import    turn your own per-sample length logs (CSV, JSONL, parquet, verl's rollout dump) into a trace
  stats     length percentiles, groups, steps; --png draws the length histogram

The trace format, import rules and examples: docs/traces.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from dora.config import build
from dora.errors import ArgumentParser, cli_errors
from dora.io import check_output
from dora.trace.generate import PRESETS, TraceParams, generate_to
from dora.trace.importer import DEFAULT_PROMPT_LEN, TARGETS, ImportOptions, group_line, import_trace, parse_map
from dora.trace.schema import load_trace
from dora.trace.sources import FORMATS
from dora.trace.stats import format_stats, trace_stats


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dora.trace", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write a long-tail trace parquet")
    g.add_argument("--preset", choices=sorted(PRESETS), help="start from a shipped preset")
    g.add_argument("--out", required=True, help="output parquet path")
    for f in dataclasses.fields(TraceParams):
        g.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=None,
                       help=f"{f.type} (default: preset's or {f.default!r})")
    i = sub.add_parser("import", help="per-sample length logs (CSV, JSONL, parquet, verl dump) to a trace parquet",
                       description="Turn per-sample length logs into a trace (rules and examples: docs/traces.md).")
    i.add_argument("src", metavar="SRC", help="a .csv, .jsonl or .parquet file, or verl's rollout_data_dir")
    i.add_argument("-o", "--out", required=True, metavar="OUT.parquet", help="trace to write")
    i.add_argument("--format", choices=FORMATS, help="input format (default: from SRC's extension; "
                   "verl = verl's rollout dump, trainer.rollout_data_dir)")
    i.add_argument("--map", action="append", default=[], metavar="TRACE=SOURCE[,...]",
                   help=f"read trace column TRACE from source column SOURCE; trace columns: {', '.join(TARGETS)} "
                        "(unmapped ones are read from a column of their own name, if any)")
    i.add_argument("--group-size", type=int, metavar="G", help="samples per prompt group (default: the most "
                   "common group size); smaller groups are dropped, larger ones cut to G at random")
    i.add_argument("--prompt-len", type=int, metavar="N", help="prompt length for every row, for logs without "
                   f"one (default {DEFAULT_PROMPT_LEN}, with a warning)")
    i.add_argument("--tokenizer", metavar="PATH", help="--format verl: local tokenizer directory or tokenizer.json "
                   "that counts the tokens of the text (needs the tokenizers package)")
    i.add_argument("--max-len", type=int, metavar="N", help="the run's response length cap, recorded: responses "
                   "of N tokens count as truncated (without a finish_reason column)")
    i.add_argument("--seed", type=int, default=0, help="seed of the draw that cuts larger groups to G (default 0)")
    s = sub.add_parser("stats", help="print length percentiles, groups, steps, tail and truncation share")
    s.add_argument("files", nargs="+")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.add_argument("--png", metavar="OUT.png", help="also draw the response-length histogram (all files on one plot)")
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
        elif args.cmd == "import":
            command = "python -m dora.trace " + shlex.join(sys.argv[1:] if argv is None else argv)
            opts = ImportOptions(src=Path(args.src), out=Path(args.out), fmt=args.format, mapping=parse_map(args.map),
                                 group_size=args.group_size, prompt_len=args.prompt_len, tokenizer=args.tokenizer,
                                 max_len=args.max_len, seed=args.seed, command=command)
            meta = import_trace(opts)
            print(f"{args.out}: from {args.src} ({meta['source']['format']}); " + group_line(meta["groups"]))
            print(format_stats(args.out, trace_stats(load_trace(args.out))))
        else:
            if args.png:
                from dora.plots.style import check_output as check_png, save

                check_png(args.png)
            all_stats, traces = {}, []
            for path in args.files:
                tr = load_trace(path)
                traces.append(tr)
                st = trace_stats(tr)
                all_stats[path] = st
                if not args.json:
                    print(format_stats(path, st))
            if args.json:
                json.dump(all_stats, sys.stdout, indent=2)
                print()
            if args.png:
                from dora.trace.histogram import length_histogram

                save(length_histogram(traces), args.png)
                if not args.json:
                    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
