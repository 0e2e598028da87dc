"""The robustness grid as data: trace families, cluster axes, variants, ablations, metrics, and
the configurations they make (grid(), the --quick subset)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from dora.sim.presets import HARDWARE, MODELS, instance_devices
from dora.trace.generate import PRESETS


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
SETTLE = 16  # replicas in all where the first REPLICAS disagree about dora >= THRESHOLD x the best baseline
THRESHOLD = 0.99  # the grid's bar: dora / best baseline
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
    "run_length_off": ["policy.dora.run_length=false"],
    "migrate_kv_on": ["policy.dora.migrate_kv=true"],
    "predictor_none": ["policy.dora.predictor=none"],
    "balance_predicted": ["policy.dora.balance=predicted"],
    "max_regenerations_1": ["policy.dora.max_regenerations=1"],
    "widen_on": ["policy.dora.widen_max=1.5"],
    "tool_calls_off": ["policy.dora.tool_calls=false"],
    "cohort_check_off": ["policy.dora.cohort_check=false"],
    "elastic_trainer_on": ["policy.dora.elastic_trainer=true"],  # (the simulator lends nothing beside elastic devices)
    "lend_trainer_off": ["policy.dora.lend_trainer=false"],
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
    """The --quick subset (see benchmarks/robustness_grid.py's docstring)."""
    return (c.kind == "base" or (c.family == "moe_longtail" and c.kind in ("one", "pair") and c.instances <= 64)
            or (c.family != "moe_longtail" and c.variation == "inst=16"))
