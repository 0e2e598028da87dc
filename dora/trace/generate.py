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

Optional families (their defaults leave a trace exactly as above, draw for draw):

- bimodal mixture (mix_share > 0): a sample takes the second mode with probability
  q_p = mix_share * exp(-mix_coupling * d_p) / E[...] (capped at 1; positive coupling: easier
  prompts take it more often), and then its body is mix_median_t * exp(d_p + e_ps) instead
  (same difficulty and noise, another median, drifting like the first); the tail applies to both;
- multi-turn agentic trajectories with tool calls (turns_mean > 1):
      turns    = 1 + Poisson((turns_mean - 1) * sqrt(L) / E[sqrt(L)])  # longer ones take more turns
      turns    = min(turns, L)                                     # each turn makes >= 1 token
      wait     = tool_wait_s_median * exp(N(0, tool_wait_sigma^2))  # seconds of EACH call (to the ms)
      tool_tok = rint(tool_tokens_median * exp(N(0, tool_tokens_sigma^2)))  # per call, <= prompt_max
  one draw of wait and tool_tok per trajectory (its turns - 1 calls all take them; 0 for a
  one-turn trajectory). L stays the total tokens the trajectory generates over its turns; the
  trace gets the columns turns, tool_wait_s and tool_tokens (dora/trace/schema.py).

New draws come after all the base model's draws, so a family switched on leaves the base draws
(difficulty, noise, tail, prompts) as they were for the same seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from dora.errors import InputError, too_small
from dora.limits import check_memory
from dora.trace.schema import write_trace

GENERATOR = "dora.trace.generate/1"
BYTES_PER_ROW = 200  # the generator's float64 temporaries and columns per trajectory, generously


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
    # bimodal mixture (off at mix_share = 0)
    mix_share: float = 0.0
    mix_median: float = 0.0
    mix_coupling: float = 1.0
    # multi-turn trajectories with tool calls (off at turns_mean = 1)
    turns_mean: float = 1.0
    tool_wait_s_median: float = 0.0
    tool_wait_sigma: float = 0.0
    tool_tokens_median: float = 0.0
    tool_tokens_sigma: float = 0.0

    def validate(self) -> None:
        for name in ("steps", "prompts_per_step", "group_size", "prompt_max", "max_len"):
            if getattr(self, name) < 1:
                raise too_small(name, getattr(self, name), 1)
        for name in ("prompt_median", "median", "tail_start", "tail_alpha"):
            if not getattr(self, name) > 0:
                raise too_small(name, getattr(self, name), 0, above=True)
        for name in ("prompt_sigma", "sigma", "drift", "moe_imbalance_cv", "tail_coupling"):
            if getattr(self, name) < 0:
                raise too_small(name, getattr(self, name), 0)
        if not 0 <= self.rho <= 1:
            raise InputError(f"rho: must be in [0, 1], got {self.rho}")
        if not 0 <= self.tail_prob <= 1:
            raise InputError(f"tail_prob: must be in [0, 1], got {self.tail_prob}")
        if not 0 <= self.mix_share <= 1:
            raise InputError(f"mix_share: must be in [0, 1], got {self.mix_share}")
        if self.mix_share > 0 and not self.mix_median > 0:
            raise too_small("mix_median", self.mix_median, 0, "with mix_share > 0", above=True,
                            fix="set it above 0, or mix_share to 0")
        if not 1 <= self.turns_mean <= self.max_len:
            raise InputError(f"turns_mean: must be in [1, max_len] (1 = one turn, no tool calls), "
                             f"got {self.turns_mean}")
        if not 0 <= self.seed < 2 ** 63:
            raise InputError(f"seed: must be in [0, 2^63), got {self.seed}")
        for name in ("mix_median", "tool_wait_s_median", "tool_wait_sigma", "tool_tokens_median",
                     "tool_tokens_sigma"):
            if getattr(self, name) < 0:
                raise too_small(name, getattr(self, name), 0)
        rows = float(self.steps) * self.prompts_per_step * self.group_size
        check_memory(f"trace of {rows:,.0f} trajectories", rows * BYTES_PER_ROW,
                     "lower steps, prompts_per_step or group_size")

    def record(self) -> dict:
        """The parameters as the trace metadata stores them: the optional families' fields only
        when they differ from their defaults (a trace without them reads as before)."""
        out = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            if f.name in FAMILY_FIELDS and out[f.name] == f.default:
                del out[f.name]
        return out


FAMILY_FIELDS = ("mix_share", "mix_median", "mix_coupling", "turns_mean", "tool_wait_s_median",
                 "tool_wait_sigma", "tool_tokens_median", "tool_tokens_sigma")


# Presets follow published figures (each preset's `source` names them); traces/README.md says which.
PRESETS: dict[str, TraceParams] = {
    # MoE long-CoT reasoning (LongCat-Flash-Thinking / DORA): 64K cap for STEM RL, p99 ~ 10x median
    # (Laminar), last 10% of trajectories holding a large share of tokens (Seer), upward drift.
    "moe_longtail": TraceParams(
        name="moe_longtail", prompt_median=400, prompt_sigma=0.6, prompt_max=4096,
        median=3000, sigma=0.75, rho=0.55, tail_prob=0.035, tail_start=3.5, tail_alpha=1.3,
        tail_coupling=1.2, max_len=65536, drift=0.5, moe_imbalance_cv=0.15, seed=2604,
        source="LongCat 64K cap; Laminar p99 ~ 10x median; Seer tail share; DORA MoE imbalance",
    ),
    # Dense math RL (DAPO-32B on verl / AReaL math): short prompts, 20K cap, milder tail.
    "dense_math": TraceParams(
        name="dense_math", prompt_median=160, prompt_sigma=0.5, prompt_max=2048,
        median=1800, sigma=0.7, rho=0.6, tail_prob=0.03, tail_start=3.0, tail_alpha=1.8,
        tail_coupling=1.0, max_len=20480, drift=0.35, moe_imbalance_cv=0.0, seed=2505,
        source="AReaL math (max 27,648, 512x16), DAPO-32B rollout ~70% of step",
    ),
    # Code / agentic: long prompts (repo context, tool transcripts), heavy tail, 32K cap.
    "code_agentic": TraceParams(
        name="code_agentic", prompt_median=1500, prompt_sigma=0.7, prompt_max=16384,
        median=2500, sigma=0.85, rho=0.45, tail_prob=0.05, tail_start=3.0, tail_alpha=1.2,
        tail_coupling=1.0, max_len=32768, drift=0.4, moe_imbalance_cv=0.0, seed=2510,
        source="ROLL Flash agentic; Applied Compute 99%/1% split; Seer 40-98K caps",
    ),
    # ---- robustness grid: one trait pushed each way (figures plausible for the field; the
    # ones without a published figure say so in `source`)
    # Heavy tail: Pareto alpha near 1 (infinite variance in the limit), a long-tail share twice
    # moe_longtail's and a 64K cap: the last 10% of requests hold most of the work (Seer's "up
    # to 50% of rollout time" and beyond).
    "heavy_tail": TraceParams(
        name="heavy_tail", prompt_median=400, prompt_sigma=0.6, prompt_max=4096,
        median=2000, sigma=0.8, rho=0.5, tail_prob=0.08, tail_start=3.0, tail_alpha=1.1,
        tail_coupling=1.2, max_len=65536, drift=0.3, moe_imbalance_cv=0.0, seed=2611,
        source="Seer last-10% share, 40-98K caps; Laminar p99 ~ 10x median (exceeded on purpose)",
    ),
    # Light tail: alpha 3, rare tail, narrow body and a 16K cap (length-penalised or short-CoT
    # RL): p99/p50 around 3, long-tail scheduling has little to win.
    "light_tail": TraceParams(
        name="light_tail", prompt_median=300, prompt_sigma=0.5, prompt_max=4096,
        median=2000, sigma=0.45, rho=0.5, tail_prob=0.005, tail_start=2.0, tail_alpha=3.0,
        tail_coupling=1.0, max_len=16384, drift=0.2, moe_imbalance_cv=0.0, seed=2612,
        source="no published figure: length-controlled RL (length penalties, short CoT), p99/p50 ~ 3",
    ),
    # Bimodal: hybrid thinking (Qwen3-style thinking / non-thinking modes, adaptive-thinking
    # RL): about a third of samples answer directly in a few hundred tokens, more often on
    # easy prompts; the rest think for thousands, with moe_longtail's kind of tail.
    "bimodal": TraceParams(
        name="bimodal", prompt_median=300, prompt_sigma=0.5, prompt_max=4096,
        median=5000, sigma=0.6, rho=0.5, tail_prob=0.03, tail_start=3.0, tail_alpha=1.5,
        tail_coupling=1.0, max_len=32768, drift=0.2, moe_imbalance_cv=0.0, seed=2613,
        mix_share=0.35, mix_median=500, mix_coupling=1.0,
        source="no published figure: hybrid thinking modes (direct answers ~ 500 tokens vs long CoT ~ 5K)",
    ),
    # Agentic with tool calls (SWE / search / code-execution agents): long prompts (task +
    # repository context), 1 + Poisson(5) turns (mostly 3-9), each tool call a lognormal wait
    # of median 5 s (p90 ~ 16 s, p99 ~ 40 s: sandbox test runs, web fetches) returning a few
    # hundred tokens of output. ROLL Flash reports its largest async gain (2.72x) on agentic RL,
    # where environment waits leave decode slots empty.
    "agentic_tools": TraceParams(
        name="agentic_tools", prompt_median=3000, prompt_sigma=0.5, prompt_max=16384,
        median=3000, sigma=0.7, rho=0.5, tail_prob=0.03, tail_start=3.0, tail_alpha=1.5,
        tail_coupling=1.0, max_len=32768, drift=0.3, moe_imbalance_cv=0.0, seed=2614,
        turns_mean=6.0, tool_wait_s_median=5.0, tool_wait_sigma=0.9, tool_tokens_median=300,
        tool_tokens_sigma=0.8,
        source="ROLL Flash 2.72x agentic; turns, tool waits and outputs not published",
    ),
    # Strong upward drift: the median grows 2.5x over the run (drift 1.5), as response lengths
    # of reasoning RL grow several-fold (LongCat raising its cap 48K -> 56K -> 64K as the p90
    # nears it): a predictor trained on early steps under-estimates late ones.
    "drift_up": TraceParams(
        name="drift_up", prompt_median=300, prompt_sigma=0.5, prompt_max=4096,
        median=1500, sigma=0.7, rho=0.55, tail_prob=0.03, tail_start=3.0, tail_alpha=1.5,
        tail_coupling=1.0, max_len=32768, drift=1.5, moe_imbalance_cv=0.0, seed=2615,
        source="LongCat caps 48K->56K->64K, upward drift; drift 1.5 is a strong case",
    ),
    # Short and nearly uniform: median 400, sigma 0.15, no tail, a 1K cap (short-answer RL):
    # every trajectory of a step ends at about the same time, so a synchronous step wastes
    # little and asynchrony should not pay here.
    "short_uniform": TraceParams(
        name="short_uniform", prompt_median=200, prompt_sigma=0.3, prompt_max=1024,
        median=400, sigma=0.15, rho=0.5, tail_prob=0.0, tail_start=4.0, tail_alpha=1.5,
        tail_coupling=1.0, max_len=1024, drift=0.0, moe_imbalance_cv=0.0, seed=2616,
        source="no published figure: a control case with no long tail",
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
    grow = 1.0 + params.drift * frac
    med_t = params.median * grow

    d = rng.normal(0.0, params.sigma * np.sqrt(params.rho), n_groups)
    e = rng.normal(0.0, params.sigma * np.sqrt(1.0 - params.rho), (n_groups, g))
    body = med_t[:, None] * np.exp(d[:, None] + e)

    w = np.exp(params.tail_coupling * d)
    p_tail = np.clip(params.tail_prob * w / w.mean(), 0.0, 1.0)
    in_tail = rng.random((n_groups, g)) < p_tail[:, None]
    pareto = (1.0 - rng.random((n_groups, g))) ** (-1.0 / params.tail_alpha)  # Pareto(alpha) >= 1
    tail_len = med_t[:, None] * params.tail_start * pareto

    prompt = params.prompt_median * np.exp(rng.normal(0.0, params.prompt_sigma, n_groups))
    prompt = np.clip(np.rint(prompt), 1, params.prompt_max).astype(np.int32)

    if params.mix_share > 0:  # the second mode replaces the body of the samples that take it
        wm = np.exp(-params.mix_coupling * d)
        p_mix = np.clip(params.mix_share * wm / wm.mean(), 0.0, 1.0)
        in_mix = rng.random((n_groups, g)) < p_mix[:, None]
        body = np.where(in_mix, (params.mix_median * grow)[:, None] * np.exp(d[:, None] + e), body)
    length = np.where(in_tail, np.maximum(body, tail_len), body)
    length = np.clip(np.rint(length), 1, params.max_len).astype(np.int32)

    prompt_id = np.repeat(np.arange(n_groups, dtype=np.int64), g)
    cols = {
        "prompt_id": prompt_id,
        "sample_idx": np.tile(np.arange(g, dtype=np.int32), n_groups),
        "prompt_len": np.repeat(prompt, g),
        "response_len": length.reshape(-1),
        "step": np.repeat(step_of_group, g),
        "finish_reason": np.where(length.reshape(-1) >= params.max_len, "length", "stop"),
    }
    if params.turns_mean > 1:
        cols.update(_tool_calls(params, rng, cols["response_len"]))
    return cols


def _tool_calls(params: TraceParams, rng: np.random.Generator, length: np.ndarray) -> dict[str, np.ndarray]:
    """turns, tool_wait_s and tool_tokens per trajectory (see the module docstring)."""
    n = len(length)
    root = np.sqrt(length.astype(np.float64))
    turns = 1 + rng.poisson((params.turns_mean - 1.0) * root / root.mean())
    turns = np.minimum(turns, length).astype(np.int32)
    wait = np.round(params.tool_wait_s_median * np.exp(rng.normal(0.0, params.tool_wait_sigma, n)), 3)  # ms
    tool = params.tool_tokens_median * np.exp(rng.normal(0.0, params.tool_tokens_sigma, n))
    tool = np.clip(np.rint(tool), 0, params.prompt_max)  # tool output is context, capped like a prompt
    one = turns == 1
    return {"turns": turns, "tool_wait_s": np.where(one, 0.0, wait),
            "tool_tokens": np.where(one, 0, tool).astype(np.int32)}


def generate_to(path: str, params: TraceParams) -> dict[str, np.ndarray]:
    cols = generate(params)
    meta = {"generator": GENERATOR, "params": params.record()}
    write_trace(path, cols, meta)
    return cols
