"""transformers backend: a causal LM stepped by hand with a KV cache and continuous batching.

For machines without vLLM (a GPU box with torch + transformers only). One generation thread
runs steps; between steps waiting requests are prefilled (as one left-padded batch) and
merged into the running batch, finished or aborted ones leave it. The batch KV cache is a
transformers DynamicCache whose rows are left-padded to a common length; the 2-D attention
mask hides the padding and position_ids carry each row's own positions. Logprobs are
log_softmax of the raw logits (temperature 1, no top-p), as in the vLLM backend.

KV migration: `export_kv` cuts a running row out of the batch cache (padding removed, to CPU)
with its sampling state; `import_kv` queues it on another engine, where it joins the batch
at the next step by merging its tensors into the cache (left-padded, mask and positions as
for a prefilled row) without running the model on its context.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from dora.errors import InputError
from dora.exec.engine.base import RolloutEngine, _Live, model_stop_ids, new_live
from dora.exec.engine.records import EngineConfig, GenRequest, GenResult, KVState
from dora.exec.engine.staged import StagedLoads
from dora.exec.engine.weights import read_checkpoint


@dataclass
class _Row:
    live: _Live
    gen: Any  # torch.Generator
    temperature: float
    top_p: float
    stop: frozenset[int]
    kv: tuple[list[Any], list[Any]] | None = None  # imported (keys, values) per layer until it joins the batch


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"engine.device {device!r}: CUDA is not available here; use 'cpu' or 'auto'")
    return device


class HfEngine(StagedLoads, RolloutEngine):
    backend = "hf"
    kv_migration = True

    def __init__(self, cfg: EngineConfig):
        super().__init__(cfg)
        import torch
        from transformers import AutoModelForCausalLM

        t0 = time.perf_counter()
        self.device = torch.device(resolve_device(cfg.device))
        if self.device.type == "cpu" and cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)  # a tiny model on a busy 2-core box: 1 thread is ~20x faster
        self.dtype = getattr(torch, cfg.dtype)
        self.model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=self.dtype).to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self._params = dict(self.model.named_parameters(remove_duplicate=False))
        self._stop = frozenset(cfg.stop_token_ids if cfg.stop_token_ids is not None else model_stop_ids(cfg.model))
        self._pad = int(self.model.config.pad_token_id if self.model.config.pad_token_id is not None else 0)
        self._seeds = random.Random(cfg.seed)
        self._inbox: deque[_Row] = deque()
        self._by_id: dict[str, _Row] = {}  # every queued or running row (guarded by _wake)
        self._rows: list[_Row] = []
        self._cache: Any = None  # DynamicCache of the running rows
        self._mask: Any = None  # [rows, T] long: 1 = real token in the cache
        self._step_lock = threading.Lock()  # held for each step; aborts and loads take it via _control()
        self._waiters = 0  # control calls waiting for the step lock (the loop yields to them)
        self._wake = threading.Condition()
        self._stopping = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="dora-hf-engine", daemon=True)
        self._thread.start()
        self.stats.startup_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ primitives
    def _start(self, req: GenRequest) -> None:
        import torch

        if self._error is not None:
            raise RuntimeError(f"hf engine stopped after an error: {self._error!r}")
        s = req.sampling
        gen = torch.Generator(device=self.device)
        gen.manual_seed(s.seed if s.seed is not None else self._seeds.randrange(2**63))
        stop = frozenset(req.stop_token_ids) if req.stop_token_ids is not None else self._stop
        row = _Row(live=new_live(req, self._version), gen=gen, temperature=s.temperature, top_p=s.top_p, stop=stop)
        with self._wake:
            self._inbox.append(row)
            self._by_id[req.request_id] = row
            self._wake.notify()

    def _live_of(self, request_id: str) -> _Live | None:
        with self._wake:
            row = self._by_id.get(request_id)
        return None if row is None else row.live

    @contextmanager
    def _control(self) -> Iterator[None]:
        """Take the step lock between two steps. threading.Lock is not fair and the loop re-takes
        it at once (a CUDA step is a few ms), so the loop waits while a control call is queued."""
        with self._wake:
            self._waiters += 1
        try:
            self._step_lock.acquire()
        finally:
            with self._wake:
                self._waiters -= 1
                self._wake.notify_all()
        try:
            yield
        finally:
            self._step_lock.release()

    def _abort(self, request_id: str) -> GenResult | None:
        with self._control():
            got = self._take(request_id, with_kv=False)
            return None if got is None else got[0].live.result("abort")

    def _take(self, request_id: str, with_kv: bool) -> tuple[_Row, list[Any] | None, list[Any] | None] | None:
        """Remove a queued or running row (under `_control`); with_kv: also its cache (a queued
        row: the cache it was imported with, or None)."""
        with self._wake:
            self._by_id.pop(request_id, None)
            for row in self._inbox:
                if row.live.req.request_id == request_id:
                    self._inbox.remove(row)
                    keys, values = row.kv if row.kv is not None and with_kv else (None, None)
                    return row, keys, values
        for i, row in enumerate(self._rows):
            if row.live.req.request_id == request_id:
                keys, values = self._row_kv(i) if with_kv else (None, None)
                self._drop_rows({i})
                return row, keys, values
        return None

    def _export(self, request_id: str) -> KVState | None:
        with self._control():
            got = self._take(request_id, with_kv=True)
            return None if got is None else self._state(*got)

    def _state(self, row: _Row, keys: list[Any] | None, values: list[Any] | None) -> KVState:
        live = row.live
        return KVState(live.result("abort"), live.req.max_new_tokens, live.req.sampling, live.req.stop_token_ids,
                       tuple(sorted(row.stop)), keys, values, (self.device.type, row.gen.get_state()))

    def _row_kv(self, i: int) -> tuple[list[Any], list[Any]]:
        """Row i's cache without its padding, on CPU: per layer [kv_heads, seq, head_dim]."""
        live = self._rows[i].live
        sel = self._mask[i].nonzero().view(-1)
        n = len(live.req.prompt_ids) + len(live.token_ids) - 1
        if len(sel) != n:
            raise RuntimeError(f"hf engine: request {live.req.request_id!r} has {len(sel)} cached tokens, "
                               f"expected prompt + generated - 1 = {n}")
        layers = self._layers(self._cache)
        return [la.keys[i][:, sel, :].cpu() for la in layers], [la.values[i][:, sel, :].cpu() for la in layers]

    def _kv_shape(self) -> tuple[int, int, int]:
        """(layers, kv_heads, head_dim) of the model's cache."""
        c = self.model.config.get_text_config(decoder=True)
        heads = c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        return c.num_hidden_layers, kv_heads, head_dim

    def _import(self, state: KVState, req: GenRequest) -> None:
        import torch

        if self._error is not None:
            raise RuntimeError(f"hf engine stopped after an error: {self._error!r}")
        part = state.part
        live = _Live(req=req, version=part.version, token_ids=list(part.token_ids), logprobs=list(part.logprobs),
                     versions=list(part.versions), reprefill=part.reprefill_tokens, t_submit=time.time())
        kv = None
        if state.keys is not None:
            if state.values is None:
                raise InputError(f"import_kv {req.request_id!r}: keys given without values")
            layers, kv_heads, head_dim = self._kv_shape()
            want = (kv_heads, len(req.prompt_ids) + len(live.token_ids) - 1, head_dim)
            if len(state.keys) != layers or len(state.values) != layers:
                raise InputError(f"import_kv {req.request_id!r}: {len(state.keys)} cache layers, the model has {layers}")
            for t in (*state.keys, *state.values):
                if tuple(t.shape) != want:
                    raise InputError(f"import_kv {req.request_id!r}: a cache tensor has shape {tuple(t.shape)}, "
                                     f"expected [kv_heads, prompt + generated - 1, head_dim] = {list(want)}")
            kv = (list(state.keys), list(state.values))
        gen = torch.Generator(device=self.device)
        if state.rng is not None and state.rng[0] == self.device.type:
            gen.set_state(state.rng[1])  # the same sampling stream as on the source
        else:
            s = req.sampling
            gen.manual_seed(s.seed if s.seed is not None else self._seeds.randrange(2**63))
        if state.stop is not None:
            stop = frozenset(state.stop)
        else:
            stop = frozenset(req.stop_token_ids) if req.stop_token_ids is not None else self._stop
        row = _Row(live=live, gen=gen, temperature=req.sampling.temperature, top_p=req.sampling.top_p, stop=stop,
                   kv=kv)
        with self._wake:
            self._inbox.append(row)
            self._by_id[req.request_id] = row
            self._wake.notify()

    def _load_tensors(self, items: list[tuple[str, Any]]) -> None:
        import torch

        with self._control(), torch.no_grad():
            loaded: set[int] = set()
            for name, t in items:
                p = self._params.get(name)
                if p is None:
                    raise InputError(f"load_weights: {name!r} is not a parameter of {self.cfg.model}; "
                                     "pass the trainer model's state_dict names")
                if tuple(p.shape) != tuple(t.shape):
                    raise InputError(f"load_weights: {name!r} has shape {tuple(t.shape)}, model has {tuple(p.shape)}")
                p.copy_(t.to(device=p.device, dtype=p.dtype))
                loaded.add(p.data_ptr())
            missing = sorted(n for n, p in self._params.items() if p.data_ptr() not in loaded)
            if missing:
                raise InputError(f"load_weights: {len(missing)} parameters not given (first: {missing[0]}); "
                                 "a version must update every parameter")
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

    def _load_path(self, path: str) -> None:
        self._load_tensors(read_checkpoint(path))

    def _shutdown(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=60)
        self._cache = None
        self.model = None

    # ------------------------------------------------------------------ generation thread
    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and (self._waiters or not (self._inbox or self._rows)):
                    self._wake.wait(0.5)
                if self._stopping:
                    return
            with self._step_lock:
                try:
                    self._step()
                except BaseException as e:  # hand every trajectory back, then stop loudly
                    self._error = e
                    traceback.print_exc(file=sys.stderr)
                    with self._wake:
                        rows = list(self._by_id.values())  # queued, mid-admission and running
                        self._inbox.clear()
                        self._by_id.clear()
                    self._rows, self._cache, self._mask = [], None, None
                    for row in rows:
                        res = row.live.result("abort")
                        res.error = f"hf engine: {type(e).__name__}: {e}"
                        self._count_stopped(row.live.req, res, aborted=True)
                        self._done.put(res)
                    return

    def _step(self) -> None:
        import torch

        with self._wake:
            room = self.cfg.max_num_seqs - len(self._rows)
            new = [self._inbox.popleft() for _ in range(min(room, len(self._inbox)))]
        prefill_tokens = 0
        with torch.no_grad():
            moved = [r for r in new if r.kv is not None]
            new = [r for r in new if r.kv is None]
            if moved:
                self._admit_kv(moved)
            if new:
                prefill_tokens = self._prefill(new)
            if not self._rows:
                return
            t0 = time.perf_counter()
            b = len(self._rows)
            ids = torch.tensor([[row.live.token_ids[-1]] for row in self._rows], device=self.device)
            self._mask = torch.cat([self._mask, self._mask.new_ones((b, 1))], dim=1)
            pos = self._mask.sum(dim=1, keepdim=True) - 1
            out = self.model(input_ids=ids, attention_mask=self._mask, position_ids=pos,
                             past_key_values=self._cache, use_cache=True)
            self._cache = out.past_key_values
            ctx = int(self._mask.sum())
            done = self._sample(self._rows, out.logits[:, -1, :])
            if done:
                self._drop_rows(done)
            dt = time.perf_counter() - t0
        with self._book:
            self.stats.add_step((time.time(), b, ctx, prefill_tokens, b, dt))

    def _prefill(self, new: list[_Row]) -> int:
        """Prefill new rows as one left-padded batch, sample their first token, merge them in."""
        import torch
        from transformers import DynamicCache

        t0 = time.perf_counter()
        seqs = [list(r.live.req.prompt_ids) + list(r.live.req.generated_ids) for r in new]
        n = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), n), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, n - len(s):] = torch.tensor(s)
            mask[i, n - len(s):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                         use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        now = time.time()
        for r in new:
            r.live.t_first = now
        done = self._sample(new, out.logits[:, -1, :])
        keep = [i for i in range(len(new)) if i not in done]
        tokens = sum(len(s) for s in seqs)
        if keep:
            if len(keep) < len(new):
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                mask = mask[idx]
            self._merge([new[i] for i in keep], cache, mask)
        dt = time.perf_counter() - t0
        with self._book:
            self.stats.add_prefill((time.time(), len(new), tokens, dt))
        return tokens

    def _admit_kv(self, rows: list[_Row]) -> None:
        """Merge imported rows into the batch from their carried cache (no forward pass)."""
        import torch
        from transformers import DynamicCache

        lens = [r.kv[0][0].shape[1] for r in rows]  # type: ignore[index]
        n = max(lens)
        layers, kv_heads, head_dim = self._kv_shape()
        cache = DynamicCache(config=self.model.config)
        for j in range(layers):
            k = torch.zeros((len(rows), kv_heads, n, head_dim), dtype=self.dtype, device=self.device)
            v = torch.zeros_like(k)
            for i, r in enumerate(rows):
                keys, values = r.kv  # type: ignore[misc]
                k[i, :, n - lens[i]:, :] = keys[j].to(device=self.device, dtype=self.dtype)
                v[i, :, n - lens[i]:, :] = values[j].to(device=self.device, dtype=self.dtype)
            cache.update(k, v, j)
        mask = torch.zeros((len(rows), n), dtype=torch.long, device=self.device)
        now = time.time()
        for i, r in enumerate(rows):
            mask[i, n - lens[i]:] = 1
            r.kv = None
            r.live.t_first = now
        self._merge(rows, cache, mask)

    def _sample(self, rows: list[_Row], logits: Any) -> set[int]:
        """Sample one token per row, record it with its raw logprob; indices of rows that finished."""
        import torch

        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        picks = []
        for i, row in enumerate(rows):
            if row.temperature == 0:
                picks.append(torch.argmax(logits[i]).view(1))
                continue
            probs = torch.softmax(logits[i] / row.temperature, dim=-1)
            if row.top_p < 1.0:
                sp, si = torch.sort(probs, descending=True)
                cut = torch.cumsum(sp, dim=-1) - sp >= row.top_p  # keep the smallest set with mass >= top_p
                sp = sp.masked_fill(cut, 0.0)
                probs = torch.zeros_like(probs).scatter_(0, si, sp)
            picks.append(torch.multinomial(probs, 1, generator=row.gen))
        toks = torch.cat(picks)
        lps = logp.gather(1, toks.view(-1, 1)).view(-1)
        done: set[int] = set()
        for i, (tok, lp) in enumerate(zip(toks.tolist(), lps.tolist())):
            live = rows[i].live
            live.token_ids.append(tok)
            live.logprobs.append(lp)
            live.versions.append(live.version)
            if tok in rows[i].stop:
                done.add(i)
            elif len(live.token_ids) >= live.req.max_new_tokens:
                done.add(i)
        if done:
            with self._wake:
                for i in done:
                    self._by_id.pop(rows[i].live.req.request_id, None)
            for i in sorted(done):
                live = rows[i].live
                self._finish(live, "stop" if live.token_ids[-1] in rows[i].stop else "length")
        return done

    def _merge(self, rows: list[_Row], cache: Any, mask: Any) -> None:
        """Append rows (with their cache and mask) to the running batch, left-padding to one length."""
        import torch

        if not self._rows:
            self._rows, self._cache, self._mask = list(rows), cache, mask
            return
        t_old, t_new = self._mask.shape[1], mask.shape[1]
        t = max(t_old, t_new)

        def pad(x: Any, extra: int, dim: int) -> Any:
            if extra == 0:
                return x
            shape = list(x.shape)
            shape[dim] = extra
            return torch.cat([x.new_zeros(shape), x], dim=dim)

        for old, add in zip(self._layers(self._cache), self._layers(cache)):
            old.keys = torch.cat([pad(old.keys, t - t_old, 2), pad(add.keys, t - t_new, 2)], dim=0)
            old.values = torch.cat([pad(old.values, t - t_old, 2), pad(add.values, t - t_new, 2)], dim=0)
        self._mask = torch.cat([pad(self._mask, t - t_old, 1), pad(mask, t - t_new, 1)], dim=0)
        self._rows.extend(rows)

    def _drop_rows(self, drop: set[int]) -> None:
        """Remove rows from the batch and trim cache columns that are padding for every row."""
        import torch

        keep = [i for i in range(len(self._rows)) if i not in drop]
        if not keep:
            self._rows, self._cache, self._mask = [], None, None
            return
        idx = torch.tensor(keep, device=self.device)
        self._rows = [self._rows[i] for i in keep]
        self._mask = self._mask[idx]
        used = self._mask.sum(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        for layer in self._layers(self._cache):
            layer.keys = layer.keys[idx, :, first:, :]
            layer.values = layer.values[idx, :, first:, :]
        self._mask = self._mask[:, first:]

    def _layers(self, cache: Any) -> list[Any]:
        layers = cache.layers
        for layer in layers:
            if type(layer).__name__ != "DynamicLayer":
                raise InputError(f"hf engine: cache layer {type(layer).__name__} (sliding/other attention) is not "
                                 "supported; use a full-attention model or --backend vllm")
        return layers
