"""python -m dora.sim sweep: run policies over a grid of config values and trace shapes.

Examples:
  python -m dora.sim sweep --grid cluster.instances=64,256,1024 --grid policy.eta=2,4 \\
      --policy dora --policy sync --steps 10 --out sweep.parquet --plot sweep.png
  python -m dora.sim sweep --grid cluster.instances,cluster.trainer_devices=64:64,256:256 --out s.csv
  python -m dora.sim sweep --trace traces/moe_longtail.parquet --trace-param tail_alpha=1.2,2,3 \\
      --policy dora --policy sync --steps 6 --out tail.parquet

Axes: each `--grid KEYS=VALUES` is one axis; the runs are the cartesian product of the axes, times
the policies. KEYS is a dotted SimConfig key (as in --set) or several comma-separated keys that
move together, each value then `a:b` (one part per key). `hardware` and `model` are keys too
(they re-derive the cost preset). `--trace-param NAME=VALUES` is an axis over a trace generator
parameter (dora/trace/generate.py TraceParams): the base parameters are those recorded in the
--trace file's metadata (or `--trace-preset`); each value's trace is generated once into
--trace-cache and reused.

The table (parquet, or CSV for a .csv path; `--csv` adds a CSV copy) has one row per run:
- the swept keys as columns, named as given (`cluster.instances`, `policy.eta`, `tail_alpha`), except
  `steps`, which is a metric name (trainer steps completed): the configured value is `target_steps`;
- `policy` and every metric of RunResult.metrics (dora.metrics names, bound_samples_per_s, sim_wall_s, ...);
- `speedup_vs_sync`: e2e_samples_per_s over sync's at the same grid point (NaN when sync did not run);
- `scaling_efficiency`: when cluster.instances is swept, (e2e_samples_per_s / instances) over the
  same at the smallest instance count of that policy with every other axis fixed; 1.0 = linear;
- the effective config: instances (rollout instances configured), sim_instances (instances the
  simulator ran, counting trainer devices that generate: colocated sync, elastic dora),
  devices_per_instance, max_seqs, kv_tokens, trainer_devices, rollout_devices, eta, batch_size,
  group_size, target_steps, seed, moe_imbalance_cv, trace, dispatches (trajectories dispatched).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

import pandas as pd
import yaml

from dora.config import build, sections_of
from dora.errors import ArgumentParser, InputError, cli_errors
from dora.io import atomic_path, check_output, check_output_dir
from dora.limits import check_time
from dora.parallel import check_jobs, run_tasks
from dora.sim.config import SimConfig
from dora.sim.presets import HARDWARE, MODELS
from dora.trace import load_trace
from dora.trace.generate import PRESETS, TraceParams, generate_to

PSEUDO_KEYS = ("hardware", "model")  # grid keys that are CLI presets, not SimConfig fields
NOT_SWEPT = ("policies",)  # use --policy
RENAMED = {"steps": "target_steps"}  # table column of a key whose name is a metric's
TABLE_TYPES = (".parquet", ".csv")


@dataclass
class Axis:
    """One sweep axis: keys that move together and their values (raw text, parsed)."""

    kind: str  # "config" or "trace"
    keys: tuple[str, ...]
    raw: list[tuple[str, ...]]
    values: list[tuple[Any, ...]]


def parser() -> argparse.ArgumentParser:
    from dora.sim.cli import parser as sim_parser

    ap = ArgumentParser(prog="python -m dora.sim sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # the run flags of `python -m dora.sim` fix the values that are not swept
    shared = {"--trace", "--config", "--cost", "--hardware", "--model", "--instances", "--devices-per-instance",
              "--max-seqs", "--trainer-devices", "--steps", "--batch-size", "--eta", "--seed", "--reference",
              "--set", "--mtbf-s", "--repair-s"}
    for act in sim_parser()._actions:
        if act.option_strings and act.option_strings[0] in shared:
            kw = {"help": act.help, "dest": act.dest, "default": act.default}
            if isinstance(act, argparse._StoreTrueAction):
                ap.add_argument(*act.option_strings, action="store_true", **kw)
            elif isinstance(act, argparse._AppendAction):
                ap.add_argument(*act.option_strings, action="append", metavar=act.metavar, **kw)
            else:
                ap.add_argument(*act.option_strings, type=act.type, metavar=act.metavar, **kw)
    ap.add_argument("--policy", action="append", default=None,
                    help="policy to run at every grid point (repeat; default: all five)")
    ap.add_argument("--grid", action="append", default=[], metavar="KEYS=VALUES",
                    help="an axis: KEY=V1,V2,... or linked KEY1,KEY2=a1:b1,a2:b2 (dotted SimConfig keys)")
    ap.add_argument("--trace-param", action="append", default=[], metavar="NAME=VALUES",
                    help="an axis over a trace generator parameter, e.g. tail_alpha=1.2,2,3")
    ap.add_argument("--trace-preset", choices=sorted(PRESETS),
                    help="generator preset the --trace-param axes start from (default: the --trace file's "
                         "recorded parameters)")
    ap.add_argument("--trace-cache", metavar="DIR", help="where generated traces go (default ~/.cache/dora/traces)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel processes (default: CPU count)")
    ap.add_argument("--ray-address", metavar="ADDR",
                    help="run the points on this Ray cluster instead ('auto', 'local', ray://host:port)")
    ap.add_argument("--out", required=True, metavar="TABLE", help="tidy table: .parquet or .csv")
    ap.add_argument("--csv", metavar="OUT.csv", help="also write the table as CSV here")
    ap.add_argument("--plot", metavar="OUT.png", help="throughput against cluster.instances (+ scaling efficiency) "
                    "when swept, else against the first axis; one figure per value of the other axes")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap


# ---------------------------------------------------------------- axes


def _config_key_ok(key: str) -> None:
    """InputError unless `key` names a settable leaf of SimConfig (or a preset pseudo-key)."""
    if key in PSEUDO_KEYS:
        return
    if key in NOT_SWEPT:
        raise InputError(f"--grid {key}: policies are not a grid key; repeat --policy instead")
    cls: Any = SimConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            raise InputError(f"--grid {key}: '{'.'.join(parts[:i])}' is a value, not a section; name it alone, "
                             f"e.g. --grid {'.'.join(parts[:i])}=1,2")
        sections = sections_of(cls)  # PolicyConfig: policy.<name>.<key> (dora.config)
        hints = {**get_type_hints(cls), **sections}
        names = [f.name for f in dataclasses.fields(cls) if f.init and not (sections and f.name == "sections")]
        names += list(sections)
        if part not in names:
            where = ".".join(parts[:i]) or "SimConfig"
            raise InputError(f"--grid {key}: unknown key '{part}' in {where}; choose from {', '.join(names)}")
        cls = hints[part]
    if dataclasses.is_dataclass(cls):
        raise InputError(f"--grid {key}: is a section, not a value; name one of its keys, e.g. {key}."
                         f"{dataclasses.fields(cls)[0].name}")


def _trace_key_ok(key: str) -> None:
    names = [f.name for f in dataclasses.fields(TraceParams) if f.name not in ("name", "source")]
    if key not in names:
        raise InputError(f"--trace-param {key}: unknown generator parameter (known: {', '.join(names)})")


def parse_axis(text: str, kind: str) -> Axis:
    """'a.b=1,2' or 'a.b,c.d=1:2,3:4' -> Axis (InputError naming the flag on anything malformed)."""
    flag = "--grid" if kind == "config" else "--trace-param"
    if "=" not in text:
        raise InputError(f"{flag} {text!r}: expected KEY=V1,V2,..., e.g. {flag} "
                         + ("cluster.instances=64,256" if kind == "config" else "tail_alpha=1.2,2"))
    lhs, rhs = text.split("=", 1)
    keys = tuple(k.strip() for k in lhs.split(","))
    if not all(keys):
        raise InputError(f"{flag} {text!r}: empty key; write KEY=V1,V2,..., e.g. {flag} "
                         + ("cluster.instances=64,256" if kind == "config" else "tail_alpha=1.2,2"))
    for k in keys:
        (_config_key_ok if kind == "config" else _trace_key_ok)(k)
    if len(set(keys)) != len(keys):
        raise InputError(f"{flag} {text!r}: a key appears twice; name each key once")
    tokens = [t.strip() for t in rhs.split(",")]
    if not rhs.strip() or not all(tokens):
        raise InputError(f"{flag} {text!r}: empty value; give comma-separated values, e.g. {lhs}=1,2")
    raw, values = [], []
    for t in tokens:
        parts = tuple(p.strip() for p in t.split(":")) if len(keys) > 1 else (t,)
        if len(parts) != len(keys):
            raise InputError(f"{flag} {text!r}: value {t!r} has {len(parts)} part(s) for {len(keys)} linked keys; "
                             f"write one a:b per point, e.g. {lhs}=" + ":".join(["1"] * len(keys)))
        raw.append(parts)
        values.append(tuple(_parse_value(p) for p in parts))
    if len(set(raw)) != len(raw):
        raise InputError(f"{flag} {text!r}: a value appears twice; list each value once")
    return Axis(kind, keys, raw, values)


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def column(key: str) -> str:
    return RENAMED.get(key, key)


# ---------------------------------------------------------------- points


@dataclass
class Point:
    """One grid point: its values by key (config and trace) and its resolved config."""

    values: dict[str, Any]
    cfg: SimConfig
    hardware: str | None
    model: str | None

    def label(self) -> str:
        return " ".join(f"{k.split('.')[-1]}={v}" for k, v in self.values.items())


def _resolve(args: argparse.Namespace, sets: list[str], hardware: str | None, model: str | None,
             devices: int | None) -> SimConfig:
    from dora.sim.cli import resolve_config

    ns = argparse.Namespace(**vars(args))
    ns.set = list(args.set) + sets
    ns.hardware, ns.model = hardware, model
    if devices is not None:
        ns.devices_per_instance = devices  # the preset derives its costs for this instance size
    return resolve_config(ns)


def _trace_base(args: argparse.Namespace, base: SimConfig) -> dict:
    """The generator parameters the --trace-param axes change."""
    if args.trace_preset:
        return dataclasses.asdict(PRESETS[args.trace_preset])
    params = load_trace(base.trace).metadata.get("params")
    if not isinstance(params, dict):
        raise InputError(f"--trace-param: {base.trace} records no generator parameters; pass --trace-preset "
                         f"({', '.join(sorted(PRESETS))}) to say which generator to start from")
    return dict(params)


def trace_path(cache: Path, params: TraceParams) -> Path:
    blob = json.dumps(params.record(), sort_keys=True).encode()  # (as before for traces without the new families)
    return cache / f"{params.name}-{hashlib.sha256(blob).hexdigest()[:16]}.parquet"


def make_points(args: argparse.Namespace, axes: list[Axis], base: SimConfig,
                cache: Path) -> tuple[list[Point], dict[Path, TraceParams]]:
    """Resolve and validate every grid point; the traces the trace axes need (path -> params)."""
    trace_axes = [a for a in axes if a.kind == "trace"]
    tbase = _trace_base(args, base) if trace_axes else {}
    points, traces = [], {}
    for combo in itertools.product(*[range(len(a.values)) for a in axes]):
        values: dict[str, Any] = {}
        sets: list[str] = []
        tover: dict[str, Any] = {}
        hardware, model, devices = args.hardware, args.model, args.devices_per_instance
        for a, i in zip(axes, combo):
            for k, raw, v in zip(a.keys, a.raw[i], a.values[i]):
                values[k] = v
                if a.kind == "trace":
                    tover[k] = v
                elif k == "hardware":
                    hardware = str(v)
                elif k == "model":
                    model = str(v)
                else:
                    sets.append(f"{k}={raw}")
                    if k == "cluster.devices_per_instance":
                        devices = v
        where = " ".join(f"{k}={v}" for k, v in values.items())
        try:
            if tover:
                params = build(TraceParams, {**tbase, **tover})
                path = trace_path(cache, params)
                traces[path] = params
                sets.append(f"trace={json.dumps(str(path))}")
            cfg = _resolve(args, sets, hardware, model, devices)
        except InputError as e:
            raise InputError(f"sweep point {where}: {e}") from None
        points.append(Point(values, cfg, hardware, model))
    return points, traces


# ---------------------------------------------------------------- running

def run_one(cfg: SimConfig, policy: str) -> dict:
    """One simulate() (in a worker process): metrics, the run's config, dispatched trajectories."""
    from dora.sim.run import cached_trace, simulate

    r = simulate(cached_trace(cfg.trace), cfg, policy, progress=False)
    return {"metrics": r.metrics, "config": r.config,
            "dispatches": int((r.events["event"].astype(str) == "dispatch").sum())}


def row(point: Point, policy: str, res: dict, axes: list[Axis]) -> dict:
    cfg, rc = point.cfg, res["config"]
    out: dict[str, Any] = {column(k): v for k, v in point.values.items()}
    out["policy"] = policy
    out.update(res["metrics"])
    out.update({
        "instances": cfg.cluster.instances, "sim_instances": rc["instances"],
        "devices_per_instance": cfg.cluster.devices_per_instance, "max_seqs": cfg.cluster.max_seqs,
        "kv_tokens": cfg.cluster.kv_tokens, "trainer_devices": cfg.cluster.trainer_devices,
        "rollout_devices": rc["rollout_devices"], "eta": cfg.policy.eta, "batch_size": cfg.policy.batch_size,
        "group_size": rc["group_size"], "target_steps": cfg.steps, "seed": cfg.seed,
        "moe_imbalance_cv": rc["moe_imbalance_cv"], "trace": cfg.trace, "dispatches": res["dispatches"],
    })
    if point.hardware or any("hardware" in a.keys for a in axes):
        out["hardware"], out["model"] = point.hardware, point.model
    return out


def add_derived(tab: pd.DataFrame, axes: list[Axis]) -> pd.DataFrame:
    """speedup_vs_sync per grid point; scaling_efficiency per policy when cluster.instances is swept."""
    swept = [column(k) for a in axes for k in a.keys]
    point = tab[swept].astype(str).agg("|".join, axis=1)
    sync = tab["e2e_samples_per_s"].where(tab["policy"] == "sync")
    base = sync.groupby(point).transform("max")  # NaN where sync did not run at that point
    tab["speedup_vs_sync"] = tab["e2e_samples_per_s"] / base
    tab["scaling_efficiency"] = math.nan
    inst_axis = next((a for a in axes if "cluster.instances" in a.keys), None)
    if inst_axis is not None:
        others = [column(k) for a in axes if a is not inst_axis for k in a.keys]
        group = tab[["policy", *others]].astype(str).agg("|".join, axis=1)
        per = tab["e2e_samples_per_s"] / tab["instances"]
        smallest = tab.groupby(group)["instances"].transform("min")
        ref = per.where(tab["instances"] == smallest).groupby(group).transform("max")
        tab["scaling_efficiency"] = per / ref
    return tab


def write_table(tab: pd.DataFrame, path: Path) -> Path:
    """The table as CSV (a .csv path) or parquet, atomically."""
    with atomic_path(path) as tmp:
        if path.suffix.lower() == ".csv":
            tab.to_csv(tmp, index=False)
        else:
            tab.to_parquet(tmp, index=False)
    return path


def plot(tab: pd.DataFrame, axes: list[Axis], out: Path) -> list[Path]:
    """Throughput against cluster.instances (with a scaling-efficiency panel) when it is swept, else
    against the first axis; one figure per combination of the other axes' values: OUT.png, or
    OUT.<key>=<v>....png."""
    from dora.plots import save
    from dora.plots.scaling import scaling_plot
    from dora.plots.sweep import sweep_plot

    first = next((a for a in axes if "cluster.instances" in a.keys), axes[0])
    x = "cluster.instances" if "cluster.instances" in first.keys else column(first.keys[0])
    others = [column(k) for a in axes if a is not first for k in a.keys[:1]]
    groups = [((), tab)] if not others else list(tab.groupby(others, sort=False))
    paths = []
    for vals, sub in groups:
        vals = vals if isinstance(vals, tuple) else (vals,)
        tag = " ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(others, vals))
        fig = (scaling_plot(sub, x=x, title=tag or None) if x == "cluster.instances"
               else sweep_plot(sub, x=x, title=tag or None))
        name = out if not tag else out.with_name(
            f"{out.stem}." + ".".join(f"{k.split('.')[-1]}={v}" for k, v in zip(others, vals)) + out.suffix)
        paths.append(save(fig, name))
    return paths


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("dora.sim sweep"):
        axes = [parse_axis(t, "config") for t in args.grid] + [parse_axis(t, "trace") for t in args.trace_param]
        if not axes:
            raise InputError("sweep: empty grid; give at least one axis, e.g. --grid cluster.instances=64,256 "
                             "or --trace-param tail_alpha=1.2,2")
        keys = [k for a in axes for k in a.keys]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise InputError(f"sweep: {', '.join(dup)} swept on more than one axis; put each key on one axis")
        if args.trace_preset and not args.trace_param:
            raise InputError("--trace-preset: only used with --trace-param; drop it or add a --trace-param axis")
        jobs = check_jobs(args.jobs)
        for k in ("hardware", "model"):
            for a in axes:
                if k in a.keys:
                    table = HARDWARE if k == "hardware" else MODELS
                    bad = [v for v in a.values if str(v[a.keys.index(k)]) not in table]
                    if bad:
                        raise InputError(f"--grid {k}: {bad[0][a.keys.index(k)]!r} unknown; choose from "
                                         f"{', '.join(table)}")
        base = _resolve(args, [], args.hardware, args.model, args.devices_per_instance)
        out = check_output(args.out, TABLE_TYPES, "--out", "sweep")
        csv = check_output(args.csv, (".csv",), "--csv", "sweep") if args.csv else None
        if args.plot:
            check_output(args.plot, ("png", "svg", "pdf"), "--plot")
        cache = Path(args.trace_cache or Path.home() / ".cache" / "dora" / "traces")
        if args.trace_param:
            check_output_dir(cache, "--trace-cache")
        points, traces = make_points(args, axes, base, cache)
        tkeys = [k for a in axes if a.kind == "trace" for k in a.keys]
        for path, params in traces.items():  # validated above; generated once, reused after
            if not path.is_file():
                generate_to(str(path), params)
                if not args.quiet:
                    what = ", ".join(f"{k}={getattr(params, k)}" for k in tkeys)
                    print(f"generated {path} ({what})", file=sys.stderr, flush=True)
        from dora.sim.memory import resolve
        from dora.sim.run import cached_trace, check_fits, run_estimate

        for p in points:
            try:
                p.cfg, _ = resolve(p.cfg, cached_trace(p.cfg.trace))  # cluster.max_seqs / kv_tokens 0: from memory
                check_fits(p.cfg, cached_trace(p.cfg.trace))
            except InputError as e:
                raise InputError(f"sweep point {p.label()}: {e}") from None
        seconds = sum(run_estimate(p.cfg, cached_trace(p.cfg.trace))[2] for p in points) / min(jobs, len(points))
        check_time(f"sweep of {len(points)} points x {len(base.policies)} policies", seconds,
                   "sweep fewer values or policies, or lower --steps")
        tasks = [(i, p, name) for i, p in enumerate(points) for name in base.policies]
        t0 = time.perf_counter()
        jobs = min(jobs, len(tasks))
        results = dict(run_tasks(run_one, [(p.cfg, name) for _, p, name in tasks], jobs, args.ray_address,
                                 desc="sweep", quiet=args.quiet))
        tab = pd.DataFrame([row(p, name, results[k], axes) for k, (_, p, name) in enumerate(tasks)])
        tab = add_derived(tab, axes)
        for path in [out] + ([csv] if csv else []):
            print(f"wrote {write_table(tab, path)} ({len(tab)} runs)", file=sys.stderr)
        if args.plot:
            for path in plot(tab, axes, Path(args.plot)):
                print(f"wrote {path}", file=sys.stderr)
        if not args.quiet:
            print(f"({time.perf_counter() - t0:.1f} s wall, {jobs} process{'es' if jobs > 1 else ''})",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
