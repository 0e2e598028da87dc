"""Robustness grid: does dora beat every baseline on every reasonable trace and cluster?

Runs every configuration of a structured grid (trace families x cluster shapes x staleness
bounds x load x hardware/model) under each VARIANTS column, in parallel local processes, with
a per-run result cache, and writes a tidy table, a per-configuration summary and a heatmap.

  python benchmarks/robustness_grid.py                 # the whole grid (--list names them)
  python benchmarks/robustness_grid.py --quick         # 37 configurations, a few minutes
  python benchmarks/robustness_grid.py --only code_agentic/ --only /eta=1 --limit 5
  python benchmarks/robustness_grid.py --ablation --quick   # dora with each mechanism flipped

Wall time on a 2-core machine (compiled build, --jobs 2): --quick (37 configurations)
about 3 min, plus 364 runs settling 4 of them; the whole grid (262 configurations, 7,280 runs
with the settling of 21) about 75 min from an empty cache, seconds from a full one.

The grid (data, in robustness/spec.py: TRACES, HW_MODELS, BASE, ONE_AT_A_TIME, PAIRS, XL, N_RANDOM):
- a trace family is a shipped trace file, or a dora.trace.generate preset (+ TraceParams
  overrides); families the generator does not have yet use a fallback expressed with today's
  TraceParams fields (TraceSpec.fallback), or are skipped with a note when they have none
  (today every family has its preset). Generated traces are
  sized to the run (B prompts per trace step, steps + eta + 2 trace steps: a drift reaches ~ its
  full value over the run) and generated once into --trace-cache (dora/sim/tools/sweep.py's cache: one
  file per parameter set).
- per family: the BASE point (H800 x qwen3-30b-a3b, 64 instances, 64 decode slots, eta 4, heavy
  load), ONE_AT_A_TIME variations of each axis, PAIRS of variations, a few XL points at 1024
  instances on some families, and N_RANDOM random combinations (fixed seed) over all families.
- load: B = LOADS[load] x instances prompt groups per step (light 1/2, heavy 2); trainer
  devices = rollout devices (instances x the preset's devices per instance); steps 20, 10 at
  >= 512 instances, raised to train at least MIN_GROUPS groups (at most MAX_STEPS steps), fewer
  if B x (steps + eta + 2) groups exceed a shipped trace's. REPLICAS runs per configuration;
  a configuration on which some replica puts dora below THRESHOLD (0.99) x the best baseline
  runs again with --settle (SETTLE, 16) replicas in all, every variant (a shipped trace: as many
  disjoint windows as it has), so the table's figure there rests on enough replicas to tell a
  loss from a replica's luck, whichever way it falls.
- MoE imbalance is a model property here: cost.moe_imbalance_cv = 0.15 (moe_longtail's) for
  the MoE model, 0 for dense ones, whatever the trace records.

--quick: every family's base point, moe_longtail's one-at-a-time and paired variations at
<= 64 instances, and every other family at 16 instances (37 configurations today). Its outputs
go to *_quick paths; --only and --limit write the default paths (rerun the whole grid, from
the cache, to rewrite them).

Each run is (configuration, variant); its result is cached in --cache under a hash of the
resolved SimConfig (without other policies' sections), the variant's policy, the trace file's
bytes, the dora source that policy's run can depend on (`code_version`) and GRID_VERSION, so a
rerun after a crash resumes (--fresh ignores the cache) and a change to one policy's file or
--set overrides reruns only it. Runs go longest first (by B x G x steps) to --jobs processes.

Outputs (temp file + rename): --csv, one row per configuration x variant (the configuration's
axes, the variant, e2e_samples_per_s, bound_samples_per_s, C1-C3 counts, migrations, waste,
staleness, eta_bound_* when the metrics have them); --summary, one row per configuration (best
baseline of BASELINES, dora / best baseline, dora / partial, whether dora held C1-C3, every
variant's throughput, and the `python -m dora.sim` arguments that reproduce it: add a variant's
--policy and --set overrides from VARIANTS); --png, heatmaps of dora / best baseline and dora /
partial (trace family x variation) and every configuration's ratio by family (random
combinations included). --ablation runs `dora` and each ABLATIONS entry instead and writes
--csv (default docs/results/ablation.csv) and prints a markdown table of dora(default) /
dora(flipped) per mechanism (entries whose keys SimConfig lacks today are skipped with a note).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # the robustness package beside this script (the tests load it by path)

from robustness import REPO  # noqa: E402 (puts the repository on sys.path for dora)
from robustness.heatmap import heatmap  # noqa: E402
from robustness.jobs import (DEFAULT_TRACE_CACHE, Notes, Traces, check_sets, check_variants, make_jobs,  # noqa: E402
                             own_sections, resolve, sim_argv, sim_config)
from robustness.report import ablation_table, paired_ci, summarize, summary_text, tidy, unsettled  # noqa: E402
from robustness.runner import DEFAULT_CACHE, run_jobs  # noqa: E402
from robustness.sources import code_version, policy_sources  # noqa: E402
from robustness.spec import (ABLATIONS, AXES, BASE, BASELINES, LARGE, ONE_AT_A_TIME, REPLICAS, SETTLE,  # noqa: E402
                             STEPS, STEPS_LARGE, THRESHOLD, TRACES, VARIANTS, GridConfig, TraceSpec, available,
                             grid, is_quick)

from dora.errors import InputError, cli_errors  # noqa: E402
from dora.sim.presets import MODELS  # noqa: E402
from dora.sim.tools.sweep import write_table  # noqa: E402

# the command, and what tests and benchmarks/compare_trees.py use from its modules (as rg.NAME)
__all__ = ["parser", "select", "default_paths", "main",
           "ABLATIONS", "AXES", "BASE", "BASELINES", "DEFAULT_CACHE", "DEFAULT_TRACE_CACHE", "MODELS", "Notes",
           "ONE_AT_A_TIME", "REPO", "TRACES", "TraceSpec", "Traces", "VARIANTS", "ablation_table", "available",
           "check_sets", "code_version", "grid", "make_jobs", "own_sections", "paired_ci", "policy_sources",
           "resolve", "run_jobs", "sim_argv", "sim_config", "summarize", "tidy", "unsettled"]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="benchmarks/robustness_grid.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the ~30-configuration development subset")
    ap.add_argument("--only", action="append", metavar="SUBSTRING",
                    help="configurations whose name contains this (repeat: any of them)")
    ap.add_argument("--limit", type=int, metavar="K", help="the first K configurations (after --quick/--only)")
    ap.add_argument("--ablation", action="store_true", help="run dora and each ABLATIONS entry instead of VARIANTS")
    ap.add_argument("--variant", action="append", metavar="NAME",
                    help="with --ablation: only this ABLATIONS entry beside dora (repeat: several)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes (default: CPU count)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached results (new results still go to the cache)")
    ap.add_argument("--steps", type=int, help="override every configuration's steps (development and tests)")
    ap.add_argument("--replicas", type=int, default=REPLICAS,
                    help=f"runs per configuration and variant, averaged (default {REPLICAS}; see resolve())")
    ap.add_argument("--settle", type=int, default=SETTLE, metavar="K",
                    help=f"replicas in all for a configuration on which some replica puts dora below {THRESHOLD} x "
                         f"the best baseline (default {SETTLE}; 0: never; not with --ablation)")
    ap.add_argument("--csv", help="tidy table (default docs/results/robustness_grid.csv; --ablation: "
                                  "docs/results/ablation.csv; --quick: *_quick.csv)")
    ap.add_argument("--summary", help="per-configuration summary (default: the --csv path with _summary)")
    ap.add_argument("--png", help="heatmap (default docs/img/robustness_grid.png; --quick: robustness_grid_quick.png)")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE),
                    help="per-run result cache (default ~/.cache/dora/robustness_grid)")
    ap.add_argument("--trace-cache", default=str(DEFAULT_TRACE_CACHE),
                    help="generated traces (default ~/.cache/dora/traces, as python -m dora.sim sweep)")
    ap.add_argument("--dora-set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra --set override for every dora run (trying a knob over the grid)")
    ap.add_argument("--list", action="store_true", help="print the selected configurations and exit")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def select(args: argparse.Namespace) -> list[GridConfig]:
    configs = grid()
    if args.quick:
        configs = [c for c in configs if is_quick(c)]
    if args.only:
        configs = [c for c in configs if any(o in c.name for o in args.only)]
    if args.limit is not None:
        configs = configs[:args.limit]
    if not configs:
        raise InputError(f"--only {' '.join(args.only or [])!r}: no configuration matches; --list shows their names")
    return configs


def default_paths(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    tag = "_quick" if args.quick else ""
    csv = Path(args.csv or REPO / "docs" / "results" / f"{'ablation' if args.ablation else 'robustness_grid'}{tag}.csv")
    summary = Path(args.summary or csv.with_name(f"{csv.stem}_summary.csv"))
    png = Path(args.png or REPO / "docs" / "img" / f"robustness_grid{tag}.png")
    return csv, summary, png


def settle(args: argparse.Namespace, configs: list[GridConfig], variants: dict, traces: Traces, notes: Notes,
           results: dict) -> tuple[list, list[str], int]:
    """Run `configs` up to --settle replicas (the first --replicas are done); their results go
    into `results`. Returns the new jobs, the failures and how many ran now."""
    more = resolve(configs, traces, notes, args.steps, args.settle)
    extra = make_jobs([r for r in more if r.replica >= args.replicas], variants, traces, notes)
    traces.loaded.clear()
    print(f"settling {len(configs)} configurations with {args.settle} replicas: {len(extra)} more runs",
          file=sys.stderr)
    res, failures, ran = run_jobs(extra, Path(args.cache), args.fresh, args.jobs, args.quiet)
    results.update(res)
    return extra, failures, ran


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("robustness_grid"):
        if args.jobs < 1:
            raise InputError(f"--jobs {args.jobs}: must be >= 1 process")
        if args.limit is not None and args.limit < 1:
            raise InputError(f"--limit {args.limit}: must be >= 1")
        if args.replicas < 1:
            raise InputError(f"--replicas {args.replicas}: must be >= 1")
        if args.settle < 0:
            raise InputError(f"--settle {args.settle}: must be >= 0 replicas (0: never)")
        if args.steps is not None and args.steps < 2:
            raise InputError(f"--steps {args.steps}: must be >= 2")
        if args.variant and not args.ablation:
            raise InputError("--variant: only with --ablation (the grid runs every policy of VARIANTS)")
        unknown = sorted(set(args.variant or ()) - set(ABLATIONS))
        if unknown:
            raise InputError(f"--variant {', '.join(unknown)}: no such ABLATIONS entry; choose from "
                             + ", ".join(ABLATIONS))
        for flag, p, types in (("--csv", args.csv, (".csv",)), ("--summary", args.summary, (".csv",)),
                               ("--png", args.png, (".png", ".svg", ".pdf"))):
            if p and (Path(p).is_dir() or Path(p).suffix.lower() not in types):
                raise InputError(f"{flag} {p}: give a file path ending in " + " or ".join(types))
        configs = select(args)
        if args.list:
            for c in configs:
                print(f"{c.name:<40} {c.kind:<6} " + " ".join(f"{k}={v}" for k, v in c.axes().items()))
            print(f"({len(configs)} configurations)", file=sys.stderr)
            return 0
        notes = Notes()
        flips = {k: v for k, v in ABLATIONS.items() if not args.variant or k in args.variant}
        variants = (dict([("dora", VARIANTS["dora"])], **{k: ("dora", tuple(v)) for k, v in flips.items()})
                    if args.ablation else VARIANTS)
        if args.dora_set:
            variants = {k: (p, (*sets, *args.dora_set)) if p == "dora" else (p, sets) for k, (p, sets) in variants.items()}
        variants = check_variants(variants)
        t0 = time.perf_counter()
        traces = Traces(Path(args.trace_cache), args.quiet)
        resolved = resolve(configs, traces, notes, args.steps, args.replicas)
        jobs = make_jobs(resolved, variants, traces, notes)
        traces.loaded.clear()
        for line in notes.lines():
            print(line, file=sys.stderr)
        if not jobs:
            raise InputError("nothing to run: every selected configuration was skipped (see above)")
        results, failures, ran = run_jobs(jobs, Path(args.cache), args.fresh, args.jobs, args.quiet)
        tab = tidy(jobs, results)
        settled = unsettled(tab, THRESHOLD) if not args.ablation and args.settle > args.replicas else []
        if settled:
            extra, fail2, ran2 = settle(args, [c for c in configs if c.name in settled], variants, traces, notes,
                                        results)
            failures, ran = failures + fail2, ran + ran2
            order = {c.name: i for i, c in enumerate(configs)}
            jobs = sorted(jobs + extra, key=lambda j: (order[j.res.config.name], j.res.replica))
            tab = tidy(jobs, results)
        wall = time.perf_counter() - t0
        csv, summary_path, png = default_paths(args)
        print(f"wrote {write_table(tab, csv)} ({len(tab)} rows)", file=sys.stderr)
        n_cfg = len({j.res.config.name for j in jobs})
        print(f"{n_cfg} configurations x {len(variants)} variants: {len(jobs)} runs, {ran} run now, "
              f"{len(jobs) - ran - len(failures)} from the cache, {len(failures)} failed; {wall:.0f} s wall, "
              f"{min(args.jobs, max(ran, 1))} process(es)")
        if settled:
            print(f"{len(settled)} configurations on which a replica put dora below {THRESHOLD}x the best baseline "
                  f"ran {args.settle} replicas (fewer where a shipped trace has fewer windows): " + ", ".join(settled))
        if args.ablation:
            print(ablation_table(tab))
        else:
            summ = summarize(tab, {j.res.config.name: j.res.command for j in jobs if j.res.replica == 0})
            print(f"wrote {write_table(summ, summary_path)} ({len(summ)} configurations)", file=sys.stderr)
            print(summary_text(summ))
            what = "--quick subset" if args.quick else f"{n_cfg} configurations"
            title = (f"Robustness grid ({what}): dora vs the baselines\nbase point: H800 x qwen3-30b-a3b, "
                     f"{BASE['instances']} instances x {BASE['max_seqs']} slots, eta {BASE['eta']}, heavy load "
                     f"(B = 2 x instances; light: B = instances / 2), {STEPS} steps ({STEPS_LARGE} at >= {LARGE} "
                     "instances)")
            print(f"wrote {heatmap(summ, png, title)}", file=sys.stderr)
        if failures:
            print(f"{len(failures)} runs failed:\n  " + "\n  ".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
