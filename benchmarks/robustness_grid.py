"""Robustness grid: does dora beat every baseline on every reasonable trace and cluster?

Runs every configuration of a structured grid (trace families x cluster shapes x staleness
bounds x load x hardware/model) under each VARIANTS column, in parallel local processes, with
a per-run result cache, and writes a tidy table, a per-configuration summary and a heatmap.

  python benchmarks/robustness_grid.py                 # the whole grid (--list names them)
  python benchmarks/robustness_grid.py --quick         # 37 configurations, a few minutes
  python benchmarks/robustness_grid.py --only code_agentic/ --only /eta=1 --limit 5
  python benchmarks/robustness_grid.py --ablation --quick   # dora with each mechanism flipped

Wall time on a 2-core machine (compiled build, --jobs 2): --quick (37 configurations)
about 3 min; the whole grid (262 configurations, 5,418 runs)
about 60 min from an empty cache, seconds from a full one.

The grid (data, below: TRACES, HW_MODELS, BASE, ONE_AT_A_TIME, PAIRS, XL, N_RANDOM):
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
  if B x (steps + eta + 2) groups exceed a shipped trace's. REPLICAS runs per configuration.
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
import dataclasses
import hashlib
import json
import math
import os
import random
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dora.config import build  # noqa: E402
from dora.errors import InputError, cli_errors  # noqa: E402
from dora.sim.presets import HARDWARE, MODELS, instance_devices  # noqa: E402
from dora.sim.tools.sweep import run_one, trace_path, write_table  # noqa: E402
from dora.trace import load_trace  # noqa: E402
from dora.trace.schema import write_trace  # noqa: E402
from dora.trace.generate import PRESETS, TraceParams, generate_to  # noqa: E402

DEFAULT_CACHE = Path.home() / ".cache" / "dora" / "robustness_grid"  # per-run results
DEFAULT_TRACE_CACHE = Path.home() / ".cache" / "dora" / "traces"  # generated traces
GRID_VERSION = "1"  # bump when what a cached run means changes outside the dora package

# ---------------------------------------------------------------- the grid, as data


@dataclass(frozen=True)
class TraceSpec:
    """A trace file (`path`, relative to the repository), or a generator `preset` with TraceParams
    `overrides`; while dora.trace.generate has no such preset, `fallback` names today's preset and
    `fallback_overrides` the fields that express the family (no fallback: the family is skipped)."""

    path: str = ""
    preset: str = ""
    overrides: tuple[tuple[str, Any], ...] = ()
    fallback: str = ""
    fallback_overrides: tuple[tuple[str, Any], ...] = ()


TRACES: dict[str, TraceSpec] = {
    "moe_longtail": TraceSpec(path="traces/moe_longtail.parquet"),
    "dense_math": TraceSpec(path="traces/dense_math.parquet"),
    "code_agentic": TraceSpec(path="traces/code_agentic.parquet"),
    # heavier tail than dense_math: 8% of samples in a Pareto(1.1) tail up to a 32K cap
    "heavy_tail": TraceSpec(preset="heavy_tail", fallback="dense_math",
                            fallback_overrides=(("tail_prob", 0.08), ("tail_alpha", 1.1), ("max_len", 32768))),
    # almost no tail: 1% of samples, Pareto(3)
    "light_tail": TraceSpec(preset="light_tail", fallback="dense_math",
                            fallback_overrides=(("tail_prob", 0.01), ("tail_alpha", 3.0))),
    # lengths triple over the run (median x (1 + 2 t / T))
    "drift_up": TraceSpec(preset="drift_up", fallback="dense_math", fallback_overrides=(("drift", 2.0),)),
    # short, narrow, no tail, 1K cap: little to balance
    "short_uniform": TraceSpec(preset="short_uniform", fallback="dense_math",
                               fallback_overrides=(("median", 500.0), ("sigma", 0.25), ("tail_prob", 0.0),
                                                   ("max_len", 1024), ("drift", 0.0))),
    "bimodal": TraceSpec(preset="bimodal"),
    "agentic_tools": TraceSpec(preset="agentic_tools"),
}


def available(family: str) -> bool:
    """Whether the family can run today (a file, the generator's preset, or a fallback)."""
    spec = TRACES[family]
    return bool(spec.path or spec.preset in PRESETS or spec.fallback)


# hardware x model: (hardware preset, model preset, extra --set overrides)
HW_MODELS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "H800:qwen3-30b-a3b": ("H800", "qwen3-30b-a3b", ("cost.moe_imbalance_cv=0.15",)),
    "H100:qwen2.5-7b": ("H100", "qwen2.5-7b", ("cost.moe_imbalance_cv=0",)),
    "H20:qwen2.5-32b": ("H20", "qwen2.5-32b", ("cost.moe_imbalance_cv=0",)),
    "H20:qwen3-30b-a3b": ("H20", "qwen3-30b-a3b", ("cost.moe_imbalance_cv=0.15",)),
}
LOADS = {"light": 0.5, "heavy": 2.0}  # prompt groups per step per rollout instance
AXES = ("hw", "instances", "max_seqs", "eta", "load")
BASE: dict[str, Any] = {"hw": "H800:qwen3-30b-a3b", "instances": 64, "max_seqs": 64, "eta": 4, "load": "heavy"}
ONE_AT_A_TIME: dict[str, tuple] = {
    "instances": (8, 16, 32, 128, 256, 512),
    "max_seqs": (32, 128, 256, 512, "auto"),  # auto: from memory (dora.sim.memory), the simulator's default
    "eta": (1, 2, 8),
    "load": ("light",),
    "hw": ("H100:qwen2.5-7b", "H20:qwen2.5-32b", "H20:qwen3-30b-a3b"),
}
PAIRS: tuple[dict[str, Any], ...] = (
    {"instances": 8, "load": "light"},
    {"instances": 256, "load": "light"},
    {"eta": 1, "max_seqs": 256},
    {"eta": 8, "max_seqs": 32},
    {"hw": "H100:qwen2.5-7b", "instances": 256},
    {"hw": "H20:qwen2.5-32b", "load": "light"},
    {"hw": "H100:qwen2.5-7b", "max_seqs": "auto"},
)
XL: tuple[tuple[str, dict[str, Any]], ...] = (  # 1024 instances: slow, a few only
    ("moe_longtail", {"instances": 1024}),
    ("moe_longtail", {"instances": 1024, "load": "light"}),
    ("dense_math", {"instances": 1024, "load": "light"}),
    ("code_agentic", {"instances": 1024, "load": "light"}),
)
N_RANDOM, RANDOM_SEED = 24, 2025
RANDOM_CHOICES: dict[str, tuple] = {
    "hw": tuple(HW_MODELS), "instances": (8, 16, 32, 64, 128, 256, 512), "max_seqs": (32, 64, 128, 256, 512),
    "eta": (1, 2, 4, 8), "load": tuple(LOADS),
}
STEPS, STEPS_LARGE, LARGE = 20, 10, 512  # steps; fewer at >= LARGE instances
MIN_GROUPS, MAX_STEPS = 1024, 200  # small batches: steps enough to train MIN_GROUPS groups (GridConfig.steps)
REPLICAS = 3  # runs per configuration and variant (resolve()): one run's throughput moves by ~5% with the seed
SHORT = {"instances": "inst", "max_seqs": "slots", "eta": "eta", "load": "load", "hw": ""}  # in variation labels

# columns of the tables: name -> (policy, --set overrides)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sync": ("sync", ()),
    "one_step": ("one_step", ()),
    "laminar": ("laminar", ()),
    "laminar_norepack": ("laminar", ("policy.laminar.repack=false",)),
    "partial": ("partial", ()),  # reported, not a must-beat: it breaks C1 by design
    "partial_areal": ("partial", ("policy.partial.strict_staleness=false",)),  # AReaL's own rule: breaks C3 too
    "dora": ("dora", ()),
}
BASELINES = ("sync", "one_step", "laminar", "laminar_norepack")  # dora must beat the best of these

# --ablation: dora with one mechanism flipped from its default (DoraConfig, dora/sched/policies/dora_config.py);
# entries naming a key the config does not have (yet) are skipped with a note
ABLATIONS: dict[str, list[str]] = {
    "spread_starts_off": ["policy.dora.spread_starts=false"],
    "spread_tails_off": ["policy.dora.spread_tails=false"],
    "host_drained_only": ["policy.dora.host_max=1"],  # tails hosted by drained instances only (the rule before host_max)
    "consolidate_off": ["policy.dora.consolidate=false"],
    "migrate_kv_off": ["policy.dora.migrate_kv=false"],
    "predictor_none": ["policy.dora.predictor=none"],
    "balance_predicted": ["policy.dora.balance=predicted"],
    "max_regenerations_1": ["policy.dora.max_regenerations=1"],
    "widen_off": ["policy.dora.widen_max=1"],
    "elastic_trainer_on": ["policy.dora.elastic_trainer=true"],
    "versions_per_instance_2": ["policy.dora.versions_per_instance=2"],
}

METRICS = ("e2e_samples_per_s", "bound_samples_per_s", "bound_fraction", "eta_bound_samples_per_s",
           "eta_bound_fraction", "eta_bound_placement_fraction", "c1_violations", "c2_lost", "c2_duplicated",
           "c3_violations", "migrations", "waste_ratio", "staleness_mean", "staleness_max", "bubble_ratio",
           "step_time_mean_s", "steps", "trained_samples", "sim_wall_s")
OPTIONAL_METRICS = ("eta_bound_samples_per_s", "eta_bound_fraction",
                    "eta_bound_placement_fraction")  # columns only when the metrics have them


@dataclass(frozen=True)
class GridConfig:
    """One configuration: a trace family and the cluster axes; `variation` says how it departs from BASE."""

    family: str
    variation: str
    kind: str  # base, one, pair, xl, random
    hw: str = BASE["hw"]
    instances: int = BASE["instances"]
    max_seqs: int | str = BASE["max_seqs"]  # or "auto"
    eta: int = BASE["eta"]
    load: str = BASE["load"]

    @property
    def name(self) -> str:
        return f"{self.family}/{self.variation}"

    @property
    def batch_size(self) -> int:
        return max(1, round(LOADS[self.load] * self.instances))

    @property
    def steps(self) -> int:
        """STEPS, more for small batches (at least MIN_GROUPS groups trained, at most MAX_STEPS:
        with a few groups a step, one run's throughput is a few tails' luck), STEPS_LARGE at
        >= LARGE instances."""
        if self.instances >= LARGE:
            return STEPS_LARGE
        return max(STEPS, min(MAX_STEPS, math.ceil(MIN_GROUPS / self.batch_size)))

    @property
    def hardware(self) -> str:
        return HW_MODELS[self.hw][0]

    @property
    def model(self) -> str:
        return HW_MODELS[self.hw][1]

    @property
    def devices_per_instance(self) -> int:
        return instance_devices(HARDWARE[self.hardware], MODELS[self.model])

    def axes(self) -> dict[str, Any]:
        return {a: getattr(self, a) for a in AXES}


def variation_label(change: dict[str, Any]) -> str:
    return ",".join(f"{SHORT[k]}={v}" if SHORT[k] else str(v) for k, v in change.items()) or "base"


def grid() -> list[GridConfig]:
    """Every configuration, in a fixed order (families in TRACES order, then XL, then random)."""
    out: list[GridConfig] = []
    for fam in TRACES:
        out.append(GridConfig(fam, "base", "base"))
        for axis, values in ONE_AT_A_TIME.items():
            out += [GridConfig(fam, variation_label({axis: v}), "one", **{**BASE, axis: v}) for v in values]
        out += [GridConfig(fam, variation_label(p), "pair", **{**BASE, **p}) for p in PAIRS]
    out += [GridConfig(fam, variation_label(p), "xl", **{**BASE, **p}) for fam, p in XL]
    seen = {(c.family, *c.axes().values()) for c in out}
    rng = random.Random(RANDOM_SEED)
    families = list(TRACES)
    n = 0
    while n < N_RANDOM:
        fam = rng.choice(families)
        ax = {a: rng.choice(RANDOM_CHOICES[a]) for a in AXES}
        key = (fam, *ax.values())
        if key not in seen:
            seen.add(key)
            out.append(GridConfig(fam, f"rand{n:02d}", "random", **ax))
            n += 1
    return out


def is_quick(c: GridConfig) -> bool:
    """The --quick subset (see the module docstring)."""
    return (c.kind == "base" or (c.family == "moe_longtail" and c.kind in ("one", "pair") and c.instances <= 64)
            or (c.family != "moe_longtail" and c.variation == "inst=16"))


# ---------------------------------------------------------------- resolving: traces, configs, runs


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


def _imports(path: Path, root: Path) -> set[Path]:
    """The dora source files `path` imports (absolute `dora.` imports, any depth in the file)."""
    import ast

    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        for name in names:
            if name == "dora" or not name.startswith("dora."):
                continue
            parts = name.split(".")[1:]
            base = root.joinpath(*parts)
            packages = [root.joinpath(*parts[:k], "__init__.py") for k in range(len(parts))]
            for f in (base.with_suffix(".py"), base / "__init__.py", *packages):
                if f.is_file():
                    out.add(f)
    return out


def policy_sources(policy: str) -> list[Path]:
    """The dora source files a run of `policy` can depend on: every file outside dora/sched/ and
    dora/exec/ (the executor, which the simulator never imports: neither body imports the other;
    a file that did would bring it back in), the files of dora/sched they import without entering
    a policy file (the shared scheduler core; registry.py imports every policy), and the policy's
    own file with what it imports."""
    import dora
    from dora.sched.registry import POLICIES

    root = Path(dora.__file__).resolve().parent
    policies = root / "sched" / "policies"
    own = root.joinpath(*POLICIES[policy].__module__.split(".")[1:]).with_suffix(".py")
    seen: set[Path] = set()
    skip = (root / "sched", root / "exec")
    todo = [p for p in root.rglob("*.py") if not any(d in p.parents for d in skip)] + [own]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(q for q in _imports(p, root)
                        if policies not in q.parents or q.name == "__init__.py" or policies in p.parents)
    return sorted(seen)


def code_version(policy: str) -> str:
    """Hash of GRID_VERSION and `policy_sources`: a cached run is reused only with all of them
    unchanged, so a change to one policy (or a module only it imports) reruns that policy alone."""
    import dora

    root = Path(dora.__file__).resolve().parent
    h = hashlib.sha256(GRID_VERSION.encode())
    for p in policy_sources(policy):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


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


# ---------------------------------------------------------------- running


def _scalar(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    return v if isinstance(v, (int, float, str, bool)) or v is None else None


def cache_file(cache: Path, key: str) -> Path:
    return cache / key[:2] / f"{key}.json"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_cached(cache: Path, key: str) -> dict | None:
    try:
        rec = json.loads(cache_file(cache, key).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("key") == key and isinstance(rec.get("metrics"), dict) else None


def run_jobs(jobs: list[Job], cache: Path, fresh: bool, procs: int, quiet: bool) -> tuple[dict, list[str], int]:
    """Results by job key (cached or run now, longest first), failures, and how many were run now."""
    from tqdm import tqdm

    results: dict[str, dict] = {}
    todo: dict[str, Job] = {}
    for j in jobs:
        rec = None if fresh else read_cached(cache, j.key)
        if rec is not None:
            results[j.key] = rec
        else:
            todo.setdefault(j.key, j)
    order = sorted(todo.values(), key=lambda j: -j.cost)
    failures: list[str] = []
    bar = tqdm(total=len(order), unit="run", disable=quiet or not order, file=sys.stderr, dynamic_ncols=True,
               desc="robustness grid", smoothing=0.05)

    def done(j: Job, out: dict | None, err: BaseException | None) -> None:
        bar.update(1)
        bar.set_postfix_str(f"{j.res.config.name} {j.variant}", refresh=False)
        if err is not None:
            failures.append(f"{j.res.config.name} {j.variant}: {type(err).__name__}: {err}")
            bar.write(f"FAILED {failures[-1]}", file=sys.stderr)
            return
        rec = {"key": j.key, "config": j.res.config.name, "variant": j.variant, "policy": j.policy,
               "command": j.command, "dispatches": out["dispatches"],
               "metrics": {k: _scalar(v) for k, v in out["metrics"].items() if _scalar(v) is not None}}
        write_atomic(cache_file(cache, j.key), json.dumps(rec))
        results[j.key] = rec

    try:
        if procs <= 1 or len(order) <= 1:
            for j in order:
                try:
                    out, err = run_one(j.cfg, j.policy), None
                except Exception as e:  # noqa: BLE001 (reported, the grid goes on)
                    out, err = None, e
                done(j, out, err)
        else:
            with ProcessPoolExecutor(max_workers=min(procs, len(order))) as pool:
                futs = {pool.submit(run_one, j.cfg, j.policy): j for j in order}
                try:
                    for f in as_completed(futs):
                        done(futs[f], None if f.exception() else f.result(), f.exception())
                except KeyboardInterrupt:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    finally:
        bar.close()
    return results, failures, len(order)


# ---------------------------------------------------------------- tables


def config_columns(r: Resolved) -> dict[str, Any]:
    c = r.config
    return {"config": c.name, "family": c.family, "kind": c.kind, "variation": c.variation, "hw": c.hw,
            "hardware": c.hardware, "model": c.model, "devices_per_instance": c.devices_per_instance,
            "instances": c.instances, "max_seqs": c.max_seqs, "eta": c.eta, "load": c.load,
            "batch_size": c.batch_size, "trainer_devices": c.instances * c.devices_per_instance,
            "target_steps": r.steps, "trace": display_path(r.trace), "trace_source": r.source}


def tidy(jobs: list[Job], results: dict[str, dict]) -> pd.DataFrame:
    """One row per configuration x variant that has a result."""
    rows = []
    for j in jobs:
        rec = results.get(j.key)
        if rec is None:
            continue
        m = rec["metrics"]
        rows.append({**config_columns(j.res), "replica": j.res.replica, "variant": j.variant, "policy": j.policy,
                     **{k: m.get(k, math.nan) for k in METRICS if k in m or k not in OPTIONAL_METRICS}})
    return pd.DataFrame(rows)


def summarize(tab: pd.DataFrame, commands: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per configuration: the best baseline, dora's ratios to it and to partial, C1-C3 held,
    and (`commands`: config -> text) the `python -m dora.sim` arguments that reproduce it."""
    if tab.empty:
        return pd.DataFrame()
    e2e = tab.pivot_table(index="config", columns="variant", values="e2e_samples_per_s", aggfunc="mean")
    first = tab.drop_duplicates("config").set_index("config")
    out = first[list(tab.columns[1:tab.columns.get_loc("replica")])].copy()  # config_columns, but "config"
    out["replicas"] = tab.groupby("config")["replica"].nunique()
    base = e2e[[b for b in BASELINES if b in e2e.columns]]
    nan = pd.Series(math.nan, index=e2e.index)
    some = base.notna().any(axis=1)  # a configuration whose baselines all failed has no best one
    out["best_baseline"] = base[some].idxmax(axis=1).reindex(e2e.index)
    out["best_baseline_samples_per_s"] = base.max(axis=1) if not base.empty else nan
    out["dora_samples_per_s"] = e2e["dora"] if "dora" in e2e else nan
    out["partial_samples_per_s"] = e2e["partial"] if "partial" in e2e else nan
    out["dora_vs_best"] = out["dora_samples_per_s"] / out["best_baseline_samples_per_s"]
    out["dora_vs_partial"] = out["dora_samples_per_s"] / out["partial_samples_per_s"]
    if "partial_areal" in e2e:
        out["dora_vs_partial_areal"] = out["dora_samples_per_s"] / e2e["partial_areal"]
        out["partial_areal_c3_violations"] = tab[tab["variant"] == "partial_areal"].groupby("config")[
            "c3_violations"].sum().reindex(out.index)
    for col in ("eta_bound_fraction", "eta_bound_placement_fraction"):
        if col in tab:
            out[f"dora_{col}"] = tab[tab["variant"] == "dora"].groupby("config")[col].mean().reindex(out.index)
    dora = tab[tab["variant"] == "dora"].groupby("config")[
        ["c1_violations", "c2_lost", "c2_duplicated", "c3_violations"]].sum().reindex(out.index)
    out["dora_c1_ok"] = dora["c1_violations"] == 0
    out["dora_c2_ok"] = (dora["c2_lost"] == 0) & (dora["c2_duplicated"] == 0)
    out["dora_c3_ok"] = dora["c3_violations"] == 0
    for v in tab["variant"].drop_duplicates():
        out[f"e2e.{v}"] = e2e[v]
    if commands:
        out["command"] = [commands.get(c, "") for c in out.index]
    order = {n: i for i, n in enumerate(tab["config"].drop_duplicates())}
    return out.sort_index(key=lambda ix: ix.map(order)).reset_index()


def summary_text(summ: pd.DataFrame) -> str:
    """The printed summary of dora / best baseline (and / partial) over the configurations."""
    r = summ["dora_vs_best"].dropna()
    if r.empty:
        return "no configuration has both dora and a baseline"
    low = summ[summ["dora_vs_best"] < 0.99].sort_values("dora_vs_best")
    lines = [f"{len(r)} configurations: dora / best baseline min {r.min():.3f} ({summ.loc[r.idxmin(), 'config']}), "
             f"median {r.median():.3f}, max {r.max():.3f}; dora >= 1.10x on {(r >= 1.10).mean():.0%} "
             f"({(r >= 1.10).sum()}/{len(r)}), below 0.99 on {len(low)}"]
    for _, row in low.iterrows():
        lines.append(f"  {row['config']:<36} {row['dora_vs_best']:.3f}  (dora {row['dora_samples_per_s']:.2f} vs "
                     f"{row['best_baseline']} {row['best_baseline_samples_per_s']:.2f} samples/s)")
    p = summ["dora_vs_partial"].dropna()
    if not p.empty:
        lines.append(f"dora / partial: min {p.min():.3f} ({summ.loc[p.idxmin(), 'config']}), median {p.median():.3f}, "
                     f"below 1 on {(p < 1).sum()}/{len(p)}")
    if "dora_vs_partial_areal" in summ:
        a = summ["dora_vs_partial_areal"].dropna()
        c3 = summ["partial_areal_c3_violations"]
        lines.append(f"dora / partial_areal (AReaL's own rule, no C3 wait): median {a.median():.3f}, below 1 on "
                     f"{(a < 1).sum()}/{len(a)}; it broke C3 on {(c3 > 0).sum()}/{len(c3)} configurations")
    for col, what in (("dora_eta_bound_fraction", "eta-aware bound"),
                      ("dora_eta_bound_placement_fraction",
                       "eta-aware bound of its placement (the trainer's devices only train)")):
        if col in summ:
            f = summ[col].dropna()
            lines.append(f"dora / {what}: median {f.median():.3f}, min {f.min():.3f}, max {f.max():.3f}")
    held = summ[["dora_c1_ok", "dora_c2_ok", "dora_c3_ok"]].all(axis=1)
    lines.append(f"dora held C1-C3 on {held.sum()}/{len(held)} configurations"
                 + ("" if held.all() else ": not on " + ", ".join(summ.loc[~held, "config"])))
    wins = summ["best_baseline"].value_counts()
    lines.append("best baseline: " + ", ".join(f"{k} {v}" for k, v in wins.items()))
    return "\n".join(lines)


def paired_ci(default: np.ndarray, flipped: np.ndarray, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of mean(default) / mean(flipped) over replicas resampled in pairs
    (a replica's two runs share its trace window and seed)."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(default), (draws, len(default)))
    r = default[i].mean(axis=1) / flipped[i].mean(axis=1)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return float(lo), float(hi)


def ablation_table(tab: pd.DataFrame) -> str:
    """Markdown: per mechanism, dora(default) / dora(flipped) over the configurations; of the
    configurations below 0.98x, how many lose for sure (the paired 95% interval below 1)."""
    e2e = tab.pivot_table(index="config", columns="variant", values="e2e_samples_per_s", aggfunc="mean")
    runs = tab.pivot_table(index=["config", "replica"], columns="variant", values="e2e_samples_per_s")
    head = ["mechanism flipped", "configs", "mean", "min", "max", "default < 0.98 x flipped",
            "of them, 95% interval < 1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for v in tab["variant"].drop_duplicates():  # ABLATIONS order
        if v == "dora":
            continue
        r = (e2e["dora"] / e2e[v]).dropna()
        if r.empty:
            continue
        below = r.index[r < 0.98]
        sure = "–"
        if tab["replica"].nunique() > 1:
            sure = str(sum(paired_ci(*runs.loc[c, ["dora", v]].dropna().to_numpy().T)[1] < 1.0 for c in below))
        lines.append(f"| {v} | {len(r)} | {r.mean():.3f} | {r.min():.3f} ({r.idxmin()}) | {r.max():.3f} "
                     f"({r.idxmax()}) | {len(below)} | {sure} |")
    return ("dora(default) / dora(flipped), e2e samples/s: > 1 = the mechanism helps\n\n" + "\n".join(lines))


# ---------------------------------------------------------------- heatmap

RATIO_TICKS = (0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


def _ratio_colorbar(fig, im, ax, limit: float, label: str) -> None:
    ticks = [t for t in RATIO_TICKS if abs(math.log2(t)) <= limit + 1e-9
             and not (limit > 0.7 and t in (0.9, 1.1))]  # no crowding near 1 on a wide scale
    cb = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01, ticks=[math.log2(t) for t in ticks])
    cb.ax.set_yticklabels([f"{t:g}" for t in ticks], fontsize=8)
    cb.set_label(label, fontsize=9)


def _heat(fig, ax, m: np.ndarray, rows: list[str], cols: list[str], limit: float, title: str, label: str) -> None:
    import matplotlib

    from matplotlib.colors import Normalize

    cmap = matplotlib.colormaps["RdBu"].copy()
    cmap.set_bad("#e6e6e6")
    lg = np.log2(m)
    im = ax.imshow(np.ma.masked_invalid(lg), cmap=cmap, norm=Normalize(-limit, limit), aspect="auto",
                   interpolation="nearest")
    for i in range(m.shape[0]):
        for k in range(m.shape[1]):
            if np.isfinite(m[i, k]):
                ax.text(k, i, f"{m[i, k]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(lg[i, k]) > 0.6 * limit else "black")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=50, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=9)
    ax.set_xticks(np.arange(-0.5, len(cols)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0)
    ax.tick_params(which="minor", length=0)
    ax.set_title(title, fontsize=10, loc="left")
    _ratio_colorbar(fig, im, ax, limit, label)


def heatmap(summ: pd.DataFrame, out: Path, title: str) -> Path:
    """dora / best baseline and dora / partial: trace family (rows) x variation from the base point
    (columns), the random combinations left out; then every configuration's dora / best baseline
    by family (random ones included)."""
    from dora.plots.style import save, subplots

    fams = [f for f in TRACES if f in set(summ["family"])]
    structured = summ[summ["kind"] != "random"]
    order = list(dict.fromkeys(c.variation for c in grid() if c.kind != "random"))
    cols = [v for v in order if v in set(structured["variation"])]
    ratios = {}
    for what in ("dora_vs_best", "dora_vs_partial"):
        piv = structured.pivot(index="family", columns="variation", values=what)
        ratios[what] = piv.reindex(index=fams, columns=cols).to_numpy(dtype=float)
    finite = np.concatenate([np.abs(np.log2(m[np.isfinite(m)])) for m in ratios.values()] + [np.zeros(1)])
    limit = float(np.clip(np.max(finite), math.log2(1.25), 2.0))
    nrow, ncol = len(fams), len(cols)
    width = max(10.0, 0.55 * ncol + 3.5)
    panel = 0.42 * nrow + 1.6
    fig, axes = subplots(3, 1, figsize=(width, 2 * panel + 0.35 * nrow + 2.2))
    fig.set_layout_engine("constrained")
    fig.get_layout_engine().set(h_pad=0.15)
    for ax in axes:
        ax.set_box_aspect(None)
    axes[0].get_gridspec().set_height_ratios([panel, panel, 0.35 * nrow + 1.0])
    _heat(fig, axes[0], ratios["dora_vs_best"], fams, cols, limit,
          "dora / best baseline (max of " + ", ".join(BASELINES) + "): > 1 blue = dora faster; grey: not run",
          "dora / best baseline")
    _heat(fig, axes[1], ratios["dora_vs_partial"], fams, cols, limit,
          "dora / partial (AReaL; breaks C1 by design, not a must-beat)", "dora / partial")
    ax = axes[2]
    for i, fam in enumerate(fams):
        sub = summ[summ["family"] == fam]
        for rand, marker, lab in ((False, "o", "structured"), (True, "x", "random combination")):
            pts = sub[(sub["kind"] == "random") == rand]["dora_vs_best"].dropna()
            ax.scatter(np.log2(pts), np.full(len(pts), i), marker=marker, s=22, alpha=0.7,
                       color="#2166ac" if not rand else "#b2182b", label=lab if i == 0 else None)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.axvline(math.log2(1.1), color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(nrow))
    ax.set_yticklabels(fams, fontsize=9)
    ax.set_ylim(nrow - 0.5, -0.5)
    allr = np.log2(summ["dora_vs_best"].dropna().to_numpy())
    lo, hi = (min(allr.min(), -0.1), max(allr.max(), 0.2)) if len(allr) else (-0.5, 0.5)
    ticks = [t for t in RATIO_TICKS if lo - 0.05 <= math.log2(t) <= hi + 0.05]
    ax.set_xticks([math.log2(t) for t in ticks])
    ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=8)
    ax.set_xlim(lo - 0.08, hi + 0.08)
    ax.set_xlabel("dora / best baseline (log scale; dashed: 1.10)", fontsize=9)
    ax.set_title("every configuration, by trace family", fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)
    fig.suptitle(title, fontsize=11)
    return save(fig, out)


# ---------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="benchmarks/robustness_grid.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the ~30-configuration development subset")
    ap.add_argument("--only", action="append", metavar="SUBSTRING",
                    help="configurations whose name contains this (repeat: any of them)")
    ap.add_argument("--limit", type=int, metavar="K", help="the first K configurations (after --quick/--only)")
    ap.add_argument("--ablation", action="store_true", help="run dora and each ABLATIONS entry instead of VARIANTS")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes (default: CPU count)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached results (new results still go to the cache)")
    ap.add_argument("--steps", type=int, help="override every configuration's steps (development and tests)")
    ap.add_argument("--replicas", type=int, default=REPLICAS,
                    help=f"runs per configuration and variant, averaged (default {REPLICAS}; see resolve())")
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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("robustness_grid"):
        if args.jobs < 1:
            raise InputError(f"--jobs {args.jobs}: must be >= 1 process")
        if args.limit is not None and args.limit < 1:
            raise InputError(f"--limit {args.limit}: must be >= 1")
        if args.replicas < 1:
            raise InputError(f"--replicas {args.replicas}: must be >= 1")
        if args.steps is not None and args.steps < 2:
            raise InputError(f"--steps {args.steps}: must be >= 2")
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
        variants = (dict([("dora", VARIANTS["dora"])], **{k: ("dora", tuple(v)) for k, v in ABLATIONS.items()})
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
        wall = time.perf_counter() - t0
        csv, summary_path, png = default_paths(args)
        tab = tidy(jobs, results)
        print(f"wrote {write_table(tab, csv)} ({len(tab)} rows)", file=sys.stderr)
        n_cfg = len({j.res.config.name for j in jobs})
        print(f"{n_cfg} configurations x {len(variants)} variants: {len(jobs)} runs, {ran} run now, "
              f"{len(jobs) - ran - len(failures)} from the cache, {len(failures)} failed; {wall:.0f} s wall, "
              f"{min(args.jobs, max(ran, 1))} process(es)")
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
