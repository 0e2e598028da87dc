"""Configurations made concrete: trace files (shipped, windowed or generated), `python -m dora.sim`
arguments, and one Job per (configuration, variant) with its cache key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dora.config import build
from dora.errors import InputError
from dora.sim.tools.sweep import trace_path
from dora.trace import load_trace
from dora.trace.generate import PRESETS, TraceParams, generate_to
from dora.trace.schema import write_trace

from . import REPO
from .sources import code_version
from .spec import HW_MODELS, STEPS, TRACES, GridConfig

DEFAULT_TRACE_CACHE = Path.home() / ".cache" / "dora" / "traces"  # generated traces


@dataclass
class Resolved:
    """A configuration made concrete: its trace file and its `python -m dora.sim` arguments."""

    config: GridConfig
    trace: str  # path the simulator loads
    source: str  # file, preset or fallback:<preset>
    steps: int
    argv: list[str]
    replica: int = 0  # seed of the MoE draws; a disjoint window of a shipped trace, another generator seed
    generate: list[str] = field(default_factory=list)  # `python -m dora.trace generate` arguments, if generated

    @property
    def command(self) -> str:
        """The `python -m dora.sim` line of this configuration (add a variant's --policy and --set),
        after the `python -m dora.trace generate` line of a generated trace."""
        shown = [display_path(a) if a == self.trace else a for a in self.argv]
        sim = "python -m dora.sim " + shlex.join(shown)
        if not self.generate:
            return sim
        return f"python -m dora.trace generate {shlex.join(self.generate)} --out {display_path(self.trace)} && {sim}"


@dataclass
class Job:
    """One run: a resolved configuration under one variant."""

    res: Resolved
    variant: str
    policy: str
    cfg: Any  # SimConfig
    key: str
    cost: float  # samples to simulate: the longest go first
    command: str


@dataclass
class Notes:
    """What was left out and why (printed, one line each)."""

    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> config names

    def add(self, reason: str, name: str) -> None:
        self.skipped.setdefault(reason, []).append(name)

    def lines(self) -> list[str]:
        return [f"skipped {len(names)} configuration{'s' if len(names) > 1 else ''} ({names[0]}"
                f"{', ...' if len(names) > 1 else ''}): {reason}" for reason, names in self.skipped.items()]


def generated_params(family: str, c: GridConfig, steps: int) -> tuple[TraceParams | None, str]:
    """The generator parameters of a generated family for configuration `c` (None: no preset, no
    fallback) and where they came from. The trace is sized to the run: B prompts per trace step."""
    spec = TRACES[family]
    if spec.preset in PRESETS:
        base, over, source = PRESETS[spec.preset], spec.overrides, "preset"
    elif spec.fallback:
        base, over, source = PRESETS[spec.fallback], spec.fallback_overrides + spec.overrides, \
            f"fallback:{spec.fallback}"
    else:
        return None, ""
    data = {**dataclasses.asdict(base), **dict(over), "name": family, "prompts_per_step": c.batch_size,
            "steps": steps + c.eta + 2}
    return build(TraceParams, data), source


def sim_argv(c: GridConfig, trace: str, steps: int) -> list[str]:
    hardware, model, sets = HW_MODELS[c.hw]
    return ["--trace", trace, "--hardware", hardware, "--model", model, "--instances", str(c.instances),
            "--max-seqs", str(c.max_seqs), "--trainer-devices", str(c.instances * c.devices_per_instance),
            "--batch-size", str(c.batch_size), "--eta", str(c.eta), "--steps", str(steps),
            *[x for s in sets for x in ("--set", s)]]


def display_path(path: str) -> str:
    """A path for the tables: relative to the repository; else (the trace cache) the file's name."""
    p = Path(path)
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else p.name


def generate_argv(params: TraceParams, source: str, family: str) -> list[str]:
    """`python -m dora.trace generate` arguments that write `params`: its preset and what differs."""
    preset = source.split(":", 1)[1] if source.startswith("fallback:") else TRACES[family].preset
    base = dataclasses.asdict(PRESETS[preset])
    out = ["--preset", preset]
    for k, v in dataclasses.asdict(params).items():
        if k not in ("name", "source") and base.get(k) != v:
            out += [f"--{k.replace('_', '-')}", str(v)]
    return out


class Traces:
    """Trace files of the grid: loaded once, generated once into the cache, digested once."""

    def __init__(self, cache: Path, quiet: bool):
        self.cache, self.quiet = cache, quiet
        self.loaded: dict[str, Any] = {}
        self.digests: dict[str, str] = {}

    def load(self, path: str):
        if path not in self.loaded:
            self.loaded[path] = load_trace(path)
        return self.loaded[path]

    def generated(self, params: TraceParams) -> str:
        path = trace_path(self.cache, params)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.parquet")
            generate_to(str(tmp), params)
            tmp.replace(path)
            if not self.quiet:
                print(f"generated {path}", file=sys.stderr, flush=True)
        return str(path)

    def window(self, path: str, first: int, groups: int) -> str:
        """Groups [first, first + groups) of a shipped trace, as a file in the cache (a replica's window)."""
        out = self.cache / f"{Path(path).stem}-groups{first}-{first + groups}.parquet"
        if not out.is_file():
            t = self.load(path)
            G = t.group_size
            rows = slice(first * G, (first + groups) * G)
            cols = {k: getattr(t, k)[rows] for k in ("prompt_id", "sample_idx", "prompt_len", "response_len", "step",
                                                     "finish_reason", "turns", "tool_wait_s", "tool_tokens")
                    if getattr(t, k) is not None}
            tmp = out.with_name(f"{out.stem}.{os.getpid()}.tmp.parquet")
            write_trace(str(tmp), cols, {**t.metadata, "window": {"source": display_path(path), "first_group": first,
                                                                  "groups": groups}})
            tmp.replace(out)
        return str(out)

    def digest(self, path: str) -> str:
        if path not in self.digests:
            self.digests[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return self.digests[path]


def resolve(configs: list[GridConfig], traces: Traces, notes: Notes, steps_override: int | None,
            replicas: int = 1) -> list[Resolved]:
    """Trace file and arguments of each configuration's replicas; the ones that cannot run today go
    to `notes`. Replica r seeds the MoE draws with r and replays another stretch of lengths: the
    r-th disjoint window of B x (steps + eta + 2) groups of a shipped trace (fewer replicas where
    the trace has no room), or the generator's seed + r."""
    out = []
    for c in configs:
        spec = TRACES[c.family]
        steps = steps_override or c.steps
        for r in range(replicas):
            if spec.path:
                path, source = str(REPO / spec.path), "file"
                have = traces.load(path).num_groups
                fit = have // c.batch_size - c.eta - 2  # B x (steps + eta + 2) groups
                if fit < 2:
                    notes.add(f"{spec.path} has too few groups for B = {c.batch_size} at eta {c.eta}", c.name)
                    break
                run_steps = min(steps, fit)
                need = c.batch_size * (run_steps + c.eta + 2)
                if r > 0:
                    if (r + 1) * need > have:
                        break  # no room for another disjoint window
                    path = traces.window(path, r * need, need)
            else:
                run_steps = steps
                params, source = generated_params(c.family, c, steps)
                if params is None:
                    notes.add(f"dora.trace.generate has no preset '{spec.preset}' yet", c.name)
                    break
                if r > 0:
                    params = dataclasses.replace(params, seed=params.seed + r)
                path = traces.generated(params)
            argv = sim_argv(c, path, run_steps) + (["--seed", str(r)] if r else [])
            gen = generate_argv(params, source, c.family) if not spec.path and params is not None else []
            out.append(Resolved(c, path, source, run_steps, argv, r, gen))
    return out


def sim_config(argv: list[str]):
    from dora.sim.cli import parser as sim_parser, resolve_config

    return resolve_config(sim_parser().parse_args(argv))


def own_sections(config: dict, policy: str) -> dict:
    """The resolved config without the sections of other policies (a run reads only its own), so
    a change to one policy's settings or defaults does not change the other policies' keys."""
    from dora.sched.registry import POLICIES

    sections = {k: v for k, v in config["policy"].items() if k not in POLICIES or k == policy}
    return {**config, "policy": sections}


def make_jobs(resolved: list[Resolved], variants: dict[str, tuple[str, tuple[str, ...]]], traces: Traces,
              notes: Notes) -> list[Job]:
    """Every (configuration, variant) run, checked as `python -m dora.sim` would before running it."""
    from dora.config import to_dict
    from dora.sim.run import check_fits

    codes: dict[str, str] = {}
    jobs = []
    for r in resolved:
        try:
            check_fits(sim_config(r.argv), traces.load(r.trace))
        except InputError as e:
            notes.add(str(e), r.config.name)
            continue
        for variant, (policy, sets) in variants.items():
            if policy not in codes:
                codes[policy] = code_version(policy)
            extra = ["--policy", policy] + [x for s in sets for x in ("--set", s)]
            cfg = sim_config(r.argv + extra)
            blob = json.dumps({"config": {**own_sections(to_dict(cfg), policy), "trace": traces.digest(r.trace)},
                               "policy": policy, "code": codes[policy]}, sort_keys=True, default=str)
            jobs.append(Job(r, variant, policy, cfg, hashlib.sha256(blob.encode()).hexdigest()[:24],
                            float(r.config.batch_size * r.steps * traces.load(r.trace).group_size),
                            f"{r.command} {shlex.join(extra)}"))
    return jobs


def check_sets(policy: str, sets: tuple[str, ...] | list[str]) -> None:
    """Raise InputError unless today's SimConfig accepts `policy` with these --set overrides."""
    probe = sim_argv(GridConfig("moe_longtail", "base", "base"), TRACES["moe_longtail"].path, STEPS)
    sim_config(probe + ["--policy", policy] + [x for s in sets for x in ("--set", s)])


def check_variants(variants: dict[str, tuple[str, tuple[str, ...]]]) -> dict:
    """The variants whose overrides today's SimConfig accepts (the others: a note)."""
    ok = {}
    for name, (policy, sets) in variants.items():
        try:
            check_sets(policy, sets)
        except InputError as e:
            print(f"skipped variant {name}: {e}", file=sys.stderr)
            continue
        ok[name] = (policy, tuple(sets))
    return ok
