"""Long-tail length traces: lognormal body, Pareto tail, per-prompt difficulty, cap, drift.

Model for sample s of prompt p drawn at RL step t (all logs natural):

    median_t = median * (1 + drift * t / (steps - 1))              # lengths grow over training
    d_p      ~ N(0, sigma^2 * rho)                                  # prompt difficulty (shared)
    e_ps     ~ N(0, sigma^2 * (1 - rho))                            # sample noise
    body     = median_t * exp(d_p + e_ps)
    tail?    ~ Bernoulli(tail_prob * exp(tail_coupling * d_p) / E[...])  # hard prompts ramble more
    tail_len = median_t * tail_start * Pareto(tail_alpha)           # heavy tail above the body
    L        = min(max(body, tail_len if tail else 1), max_len)     # `length` finish at the cap

`rho` is the intra-group correlation of log lengths. `moe_imbalance_cv` is not a per-row
property: it is recorded in the metadata and the simulator draws per-instance expert-parallel
slowdowns with that coefficient of variation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from dora.errors import InputError
from dora.trace.schema import write_trace

GENERATOR = "dora.trace.generate/1"


@dataclass
class TraceParams:
    """Generator parameters; stored verbatim in the parquet metadata."""

    name: str = "custom"
    steps: int = 64
    prompts_per_step: int = 512
    group_size: int = 16
    prompt_median: float = 300.0
    prompt_sigma: float = 0.5
    prompt_max: int = 4096
    median: float = 2000.0
    sigma: float = 0.9
    rho: float = 0.5
    tail_prob: float = 0.03
    tail_start: float = 4.0
    tail_alpha: float = 1.5
    tail_coupling: float = 1.0
    max_len: int = 32768
    drift: float = 0.3
    moe_imbalance_cv: float = 0.0
    seed: int = 0
    source: str = ""

    def validate(self) -> None:
        for name in ("steps", "prompts_per_step", "group_size", "prompt_max", "max_len"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("prompt_median", "median", "tail_start", "tail_alpha"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("prompt_sigma", "sigma", "drift", "moe_imbalance_cv", "tail_coupling"):
            if getattr(self, name) < 0:
                raise InputError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.rho <= 1:
            raise InputError(f"rho: must be in [0, 1], got {self.rho}")
        if not 0 <= self.tail_prob <= 1:
            raise InputError(f"tail_prob: must be in [0, 1], got {self.tail_prob}")


# Presets follow the figures in shared/ANCHORS.md; traces/README.md says which.
PRESETS: dict[str, TraceParams] = {
    # MoE long-CoT reasoning (LongCat-Flash-Thinking / DORA): 64K cap for STEM RL, p99 ~ 10x median
    # (Laminar), last 10% of trajectories holding a large share of tokens (Seer), upward drift.
    "moe_longtail": TraceParams(
        name="moe_longtail", prompt_median=400, prompt_sigma=0.6, prompt_max=4096,
        median=3000, sigma=0.75, rho=0.55, tail_prob=0.035, tail_start=3.5, tail_alpha=1.3,
        tail_coupling=1.2, max_len=65536, drift=0.5, moe_imbalance_cv=0.15, seed=2604,
        source="ANCHORS.md: LongCat 64K cap; Laminar p99 ~ 10x median; Seer tail share; DORA MoE imbalance",
    ),
    # Dense math RL (DAPO-32B on verl / AReaL math): short prompts, 20K cap, milder tail.
    "dense_math": TraceParams(
        name="dense_math", prompt_median=160, prompt_sigma=0.5, prompt_max=2048,
        median=1800, sigma=0.7, rho=0.6, tail_prob=0.03, tail_start=3.0, tail_alpha=1.8,
        tail_coupling=1.0, max_len=20480, drift=0.35, moe_imbalance_cv=0.0, seed=2505,
        source="ANCHORS.md: AReaL math (max 27,648, 512x16), DAPO-32B rollout ~70% of step",
    ),
    # Code / agentic: long prompts (repo context, tool transcripts), heavy tail, 32K cap.
    "code_agentic": TraceParams(
        name="code_agentic", prompt_median=1500, prompt_sigma=0.7, prompt_max=16384,
        median=2500, sigma=0.85, rho=0.45, tail_prob=0.05, tail_start=3.0, tail_alpha=1.2,
        tail_coupling=1.0, max_len=32768, drift=0.4, moe_imbalance_cv=0.0, seed=2510,
        source="ANCHORS.md: ROLL Flash agentic; Applied Compute 99%/1% split; Seer 40-98K caps",
    ),
}


def generate(params: TraceParams) -> dict[str, np.ndarray]:
    """Draw one trace's columns (vectorised; deterministic for params.seed)."""
    params.validate()
    rng = np.random.default_rng(params.seed)
    n_groups = params.steps * params.prompts_per_step
    g = params.group_size
    step_of_group = np.repeat(np.arange(params.steps, dtype=np.int32), params.prompts_per_step)
    frac = step_of_group / max(params.steps - 1, 1)
    med_t = params.median * (1.0 + params.drift * frac)

    d = rng.normal(0.0, params.sigma * np.sqrt(params.rho), n_groups)
    e = rng.normal(0.0, params.sigma * np.sqrt(1.0 - params.rho), (n_groups, g))
    body = med_t[:, None] * np.exp(d[:, None] + e)

    w = np.exp(params.tail_coupling * d)
    p_tail = np.clip(params.tail_prob * w / w.mean(), 0.0, 1.0)
    in_tail = rng.random((n_groups, g)) < p_tail[:, None]
    pareto = (1.0 - rng.random((n_groups, g))) ** (-1.0 / params.tail_alpha)  # Pareto(alpha) >= 1
    tail_len = med_t[:, None] * params.tail_start * pareto
    length = np.where(in_tail, np.maximum(body, tail_len), body)
    length = np.clip(np.rint(length), 1, params.max_len).astype(np.int32)

    prompt = params.prompt_median * np.exp(rng.normal(0.0, params.prompt_sigma, n_groups))
    prompt = np.clip(np.rint(prompt), 1, params.prompt_max).astype(np.int32)

    prompt_id = np.repeat(np.arange(n_groups, dtype=np.int64), g)
    return {
        "prompt_id": prompt_id,
        "sample_idx": np.tile(np.arange(g, dtype=np.int32), n_groups),
        "prompt_len": np.repeat(prompt, g),
        "response_len": length.reshape(-1),
        "step": np.repeat(step_of_group, g),
        "finish_reason": np.where(length.reshape(-1) >= params.max_len, "length", "stop"),
    }


def generate_to(path: str, params: TraceParams) -> dict[str, np.ndarray]:
    cols = generate(params)
    meta = {"generator": GENERATOR, "params": dataclasses.asdict(params)}
    write_trace(path, cols, meta)
    return cols
