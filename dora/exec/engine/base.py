"""The rollout-engine interface shared by the vLLM and transformers backends.

An engine serves one policy version at a time. The caller (a Ray actor driven by the
orchestrator, or a test) submits `GenRequest`s, polls `GenResult`s as they finish one by
one, aborts requests (getting back what they generated so far, to resume elsewhere), and
loads new versions in-process. Every generated token carries the version that sampled it.

All public methods are thread-safe and synchronous; each backend runs its own generation
thread. Logprobs are those of the sampled token under the model's raw distribution
(log_softmax of the unprocessed logits: temperature 1, no top-p), which is what the
trainer recomputes.
"""

from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from dora.errors import InputError
from dora.exec.engine.records import (EngineBusyError, EngineConfig, EngineStateLost, EngineStats, FinishReason,
                                      GenRequest, GenResult, KVState, LoadMode, SamplingConfig)


@dataclass
class _Live:
    """Book-keeping for a request the backend is running (shared by both backends)."""

    req: GenRequest
    version: int
    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    reprefill: int
    t_submit: float
    t_first: float = 0.0
    kv_loaded: int = 0  # vllm: tokens of a moved KV cache its first output must report as cached

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids) - len(self.req.generated_ids)

    def result(self, reason: FinishReason) -> GenResult:
        return GenResult(request_id=self.req.request_id, prompt_ids=list(self.req.prompt_ids),
                         token_ids=list(self.token_ids), logprobs=list(self.logprobs), versions=list(self.versions),
                         finish_reason=reason, version=self.version, reprefill_tokens=self.reprefill,
                         t_submit=self.t_submit, t_first_token=self.t_first, t_finish=time.time())


def new_live(req: GenRequest, version: int) -> _Live:
    """Start book-keeping; a resumed request pays re-prefill of prompt + generated tokens."""
    reprefill = req.reprefill_tokens + (len(req.prompt_ids) + len(req.generated_ids) if req.generated_ids else 0)
    return _Live(req=req, version=version, token_ids=list(req.generated_ids), logprobs=list(req.generated_logprobs),
                 versions=list(req.generated_versions), reprefill=reprefill, t_submit=time.time())


Tensors = Mapping[str, Any] | Iterable[tuple[str, Any]]


class RolloutEngine(ABC):
    """One rollout instance. Requests for a version not yet loaded wait until it is.

    Locks: `_lock` serialises the control calls (submit/abort/load); `_book` guards the
    request table and stats and is never held while waiting. Generation threads take only
    `_book`, so a control call may wait on them without deadlock.
    """

    backend: str = ""
    #: whether a load that failed part-way can simply be tried again (else the engine is lost)
    reload_retryable: bool = True
    #: whether a running request can leave with its KV cache (`export_kv` / `import_kv`)
    kv_migration: bool = False

    def __init__(self, cfg: EngineConfig):
        cfg.validate()
        self.cfg = cfg
        self._lock = threading.RLock()
        self._book = threading.Lock()
        self._done: "queue.Queue[GenResult]" = queue.Queue()
        self._held: dict[str, GenRequest] = {}  # waiting for their version to be loaded
        self._reqs: dict[str, GenRequest] = {}  # running or held, by id
        self._version = cfg.initial_version
        self.stats = EngineStats(backend=self.backend)
        self._closed = False
        self._mixed = False  # a load failed part-way: weights of neither version; nothing runs until a load succeeds
        self._lost = ""  # set when a failed load cannot be redone (reload_retryable False): every load refuses

    # ---------------------------------------------------------------- public API
    @property
    def version(self) -> int:
        """The loaded version."""
        return self._version

    @property
    def serving(self) -> bool:
        """False after a failed load, until a load succeeds (the weights may be half-replaced)."""
        return not self._mixed

    def submit(self, req: GenRequest) -> None:
        """Queue a request. Its version must be the loaded one or a later one (then it waits)."""
        req.validate()
        self._check_fits(req, "request")
        with self._lock:
            self._check_open()
            with self._book:
                if req.request_id in self._reqs:
                    raise ValueError(f"request {req.request_id!r} is already running or queued on this engine")
                if req.version < self._version:
                    raise ValueError(f"request {req.request_id!r} wants version {req.version} but this engine has "
                                     f"version {self._version} loaded; versions only move forward")
                self._reqs[req.request_id] = req
                if req.version != self._version or self._mixed:
                    self._held[req.request_id] = req
                    return
            self._start(req)

    def submit_many(self, reqs: Iterable[GenRequest]) -> None:
        for r in reqs:
            self.submit(r)

    def poll(self, timeout: float = 0.0, max_results: int | None = None) -> list[GenResult]:
        """Results finished since the last poll (waits up to `timeout` s for the first one)."""
        out: list[GenResult] = []
        try:
            out.append(self._done.get(timeout=timeout) if timeout > 0 else self._done.get_nowait())
        except queue.Empty:
            return out
        while max_results is None or len(out) < max_results:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                break
        return out

    def warm_up(self, timeout_s: float = 600.0) -> float:
        """Generate `cfg.warm_up_requests` throwaway greedy requests of a few tokens, then forget them
        (stats back to empty but for start-up, prefix cache reset). Call before any other request.
        Returns the seconds it took."""
        t0 = time.perf_counter()
        n = self.cfg.warm_up_requests
        ids = [f"__warm_up_{i}" for i in range(n)]
        for i, rid in enumerate(ids):
            self.submit(GenRequest(rid, [1 + i, 2, 3, 4], 4, self._version, SamplingConfig(temperature=0.0)))
        got: list[GenResult] = []
        while len(got) < n:
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"{self.backend} engine: warm-up of {n} requests took over {timeout_s:.0f} s")
            got += self.poll(0.05)
        errors = [r.error for r in got if r.error]
        if errors:
            raise RuntimeError(f"{self.backend} engine: warm-up request failed: {errors[0]}")
        self.reset_prefix_cache()
        dt = time.perf_counter() - t0
        self.stats = EngineStats(backend=self.backend, startup_s=self.stats.startup_s + dt)
        return dt

    def reset_prefix_cache(self) -> bool:
        """Drop cached prompt prefixes (backends without a prefix cache: nothing to do)."""
        return True

    def abort(self, request_id: str) -> GenResult | None:
        """Stop a request and return what it generated so far (finish_reason 'abort').

        None if the engine does not know the id (or it already finished: poll() has it)."""
        with self._lock:
            with self._book:
                held = self._held.pop(request_id, None)
                if held is not None:
                    del self._reqs[request_id]
                    self.stats.aborted += 1
                    return new_live(held, held.version).result("abort")
                req = self._reqs.get(request_id)
            if req is None:
                return None
            res = self._abort(request_id)
            if res is not None:
                self._count_stopped(req, res, aborted=True)
            return res

    def export_kv(self, request_id: str) -> KVState | None:
        """Stop a request and hand back its state with its KV cache (see KVState), to continue
        on another engine with `import_kv`. None if unknown or finished (poll() has it)."""
        self._need_kv("export_kv")
        with self._lock:
            with self._book:
                held = self._held.pop(request_id, None)
                if held is not None:  # waiting for its version: nothing computed, nothing to carry
                    del self._reqs[request_id]
                    self.stats.aborted += 1
                    return KVState(new_live(held, held.version).result("abort"), held.max_new_tokens, held.sampling,
                                   held.stop_token_ids, None, None, None)
                req = self._reqs.get(request_id)
            if req is None:
                return None
            state = self._export(request_id)
            if state is not None:
                self._count_stopped(req, state.part, aborted=True)
            return state

    def import_kv(self, state: KVState) -> None:
        """Continue an exported request here from its KV cache, without running the model on its
        prompt. Its version must be the one loaded here."""
        self._need_kv("import_kv")
        part = state.part
        rid = part.request_id
        req = GenRequest.resume(part, state.max_new_tokens, state.sampling, stop_token_ids=state.stop_token_ids)
        req.validate()
        self._check_fits(req, "import_kv")
        with self._lock:
            self._check_open()
            with self._book:
                if rid in self._reqs:
                    raise ValueError(f"request {rid!r} is already running or queued on this engine")
                if part.version != self._version or self._mixed:
                    loaded = "no consistent version (a load failed)" if self._mixed else f"version {self._version}"
                    raise ValueError(f"import_kv {rid!r}: its KV cache was computed by version {part.version}, this "
                                     f"engine has {loaded} loaded; a KV cache moves only between engines serving "
                                     "its version")
                self._reqs[rid] = req
            try:
                self._import(state, req)
            except BaseException:
                with self._book:
                    self._reqs.pop(rid, None)
                raise

    def _check_fits(self, req: GenRequest, what: str) -> None:
        """InputError unless prompt + max_new_tokens fits the engine's max_model_len."""
        budget = len(req.prompt_ids) + req.max_new_tokens
        if budget > self.cfg.max_model_len:
            raise InputError(f"{what} {req.request_id!r}: prompt ({len(req.prompt_ids)}) + max_new_tokens "
                             f"({req.max_new_tokens}) = {budget} exceeds engine max_model_len "
                             f"{self.cfg.max_model_len}; lower max_new_tokens or raise max_model_len")

    def _need_kv(self, call: str) -> None:
        if not self.kv_migration:
            raise NotImplementedError(f"{call}: the {self.backend} engine cannot move a KV cache "
                                      "(kv_migration is False); migrate by abort + GenRequest.resume")

    def peek(self, request_id: str) -> GenResult | None:
        """A snapshot of a running request (finish_reason 'abort' as a placeholder), None if unknown."""
        live = self._live_of(request_id)
        return None if live is None else live.result("abort")

    def running_ids(self) -> list[str]:
        """Requests running or waiting for their version."""
        with self._book:
            return sorted(self._reqs)

    def kv_in_use(self) -> int:
        """KV-cache tokens of the running requests: prompt + generated so far (held ones hold none)."""
        with self._book:
            ids = [r for r in self._reqs if r not in self._held]
        total = 0
        for rid in ids:
            live = self._live_of(rid)
            if live is not None:
                total += len(live.req.prompt_ids) + len(live.token_ids)
        return total

    def num_running(self) -> int:
        with self._book:
            return len(self._reqs) - len(self._held)

    def load_weights(self, version: int, tensors: Tensors, mode: LoadMode = "drain") -> float:
        """Load `version` from named tensors in memory (HF names, as the trainer's state_dict).
        Returns the seconds the load took."""
        items = list(tensors.items()) if isinstance(tensors, Mapping) else list(tensors)
        if not items:
            raise InputError(f"load_weights(version={version}): no tensors given")
        return self._load(version, "tensors", items, mode)

    def load_checkpoint(self, version: int, path: str | Path, mode: LoadMode = "drain") -> float:
        """Load `version` from a HF checkpoint directory (safetensors). Returns seconds."""
        p = Path(path)
        if not p.is_dir() or not any(p.glob("*.safetensors")):
            raise InputError(f"load_checkpoint(version={version}): {p} is not a directory with *.safetensors files")
        return self._load(version, "checkpoint", str(p.resolve()), mode)

    def get_stats(self) -> dict[str, Any]:
        with self._book:
            d = self.stats.to_dict()
        d["version"] = self._version
        return d

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown()

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- shared machinery
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.backend} engine is closed")

    def _count_stopped(self, req: GenRequest, res: GenResult, aborted: bool) -> None:
        with self._book:
            self._reqs.pop(req.request_id, None)
            self.stats.generated_tokens += len(res.token_ids) - len(req.generated_ids)
            self.stats.reprefill_tokens += res.reprefill_tokens - req.reprefill_tokens
            if aborted:
                self.stats.aborted += 1
            else:
                self.stats.finished += 1

    def _finish(self, live: _Live, reason: FinishReason) -> None:
        """Backends call this (from their generation thread) when a request ends by itself."""
        res = live.result(reason)
        self._count_stopped(live.req, res, aborted=False)
        self._done.put(res)

    def _load(self, version: int, kind: str, payload: Any, mode: LoadMode) -> float:
        if mode not in ("drain", "interrupt"):
            raise InputError(f"load mode {mode!r}: not one of 'drain', 'interrupt' "
                             "('add', several versions per instance, is not supported by these backends)")
        with self._lock:
            self._check_open()
            if self._lost:
                raise EngineStateLost(self._lost)
            if version <= self._version:
                raise ValueError(f"load version {version}: engine already has version {self._version}; "
                                 "versions only move forward")
            with self._book:
                running = [r for i, r in self._reqs.items() if i not in self._held]
            if running and mode == "drain":
                raise EngineBusyError(f"load version {version} (drain): {len(running)} requests of version "
                                      f"{self._version} still run; abort/migrate them or use mode='interrupt'")
            resumed: list[GenRequest] = []
            for orig in running:  # interrupt: pause, drop KV, continue under the new version
                part = self._abort(orig.request_id)
                if part is None:  # finished meanwhile: poll() has it
                    continue
                self._count_stopped(orig, part, aborted=False)
                self.stats.finished -= 1  # an interruption is neither a finish nor an abort
                resumed.append(GenRequest.resume(part, max_new_tokens=orig.max_new_tokens, sampling=orig.sampling,
                                                 version=version, stop_token_ids=orig.stop_token_ids))
            t0 = time.perf_counter()
            try:
                if kind == "tensors":
                    self._load_tensors(payload)
                elif kind == "collective":
                    self._load_staged(payload)
                else:
                    self._load_path(payload)
            except BaseException as e:
                # Part of the new weights may be in place: serve nothing until a load succeeds. The
                # interrupted requests wait for `version` like any request submitted for it.
                with self._book:
                    self._mixed = True
                    for req in resumed:
                        self._reqs[req.request_id] = req
                        self._held[req.request_id] = req
                if not self.reload_retryable:
                    self._lost = (f"{self.backend} engine: loading version {version} failed part-way "
                                  f"({type(e).__name__}: {' '.join(str(e).split())[:200]}) and this backend cannot "
                                  "redo a load in place; replace the engine")
                    raise EngineStateLost(self._lost) from e
                raise
            dt = time.perf_counter() - t0
            with self._book:
                self._mixed = False
                self._version = version
                self.stats.weight_loads.append((time.time(), version, kind, dt))
                start = list(resumed)
                for req in resumed:
                    self._reqs[req.request_id] = req
                for rid, req in list(self._held.items()):
                    if req.version <= version:
                        del self._held[rid]
                        if req.version == version:
                            start.append(req)
                        else:  # can never run here: hand it back as aborted
                            del self._reqs[rid]
                            self.stats.aborted += 1
                            self._done.put(new_live(req, req.version).result("abort"))
            for req in start:
                self._start(req)
            return dt

    # ---------------------------------------------------------------- backend primitives
    @abstractmethod
    def _start(self, req: GenRequest) -> None:
        """Begin generating (the request's version is loaded). Must not block on generation."""

    @abstractmethod
    def _live_of(self, request_id: str) -> _Live | None:
        """The book-keeping of a running or queued request (read-only use)."""

    @abstractmethod
    def _abort(self, request_id: str) -> GenResult | None:
        """Stop a running request; its partial result, or None if unknown/finished."""

    def _export(self, request_id: str) -> KVState | None:
        """Stop a running request and return its state with its KV cache (kv_migration backends)."""
        raise NotImplementedError

    def _import(self, state: KVState, req: GenRequest) -> None:
        """Add an exported request as running from its KV cache (kv_migration backends)."""
        raise NotImplementedError

    @abstractmethod
    def _load_tensors(self, items: list[tuple[str, Any]]) -> None:
        """Replace the weights in place from (HF name, tensor) pairs; no request is running."""

    @abstractmethod
    def _load_path(self, path: str) -> None:
        """Replace the weights in place from a checkpoint directory; no request is running."""

    @abstractmethod
    def _load_staged(self, payload: Any) -> None:
        """Replace the weights in place from a staged version (dora.exec.engine.staged.StagedLoads)."""

    @abstractmethod
    def _shutdown(self) -> None:
        """Stop the generation thread and free the model."""


def model_stop_ids(model: str) -> tuple[int, ...]:
    """eos ids from a checkpoint's generation_config.json / config.json (local dir or hub id)."""
    from transformers import AutoConfig, GenerationConfig

    ids: list[int] = []
    try:
        gc = GenerationConfig.from_pretrained(model)
        eos = gc.eos_token_id
        ids += [eos] if isinstance(eos, int) else list(eos or [])
    except OSError:
        pass
    if not ids:
        eos = AutoConfig.from_pretrained(model).eos_token_id
        ids += [eos] if isinstance(eos, int) else list(eos or [])
    if not ids:
        raise InputError(f"model {model}: no eos_token_id in generation_config.json or config.json; "
                         "set engine.stop_token_ids")
    return tuple(dict.fromkeys(int(i) for i in ids))
