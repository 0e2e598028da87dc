"""DoraKVConnector: moves a running request's KV cache between vLLM engines through vLLM's
KV-transfer connector interface (`kv_transfer_config`, v1 `KVConnectorBase_V1`).

The store is a directory every engine of the run can read (one host, or a shared filesystem).
Every request carries `kv_transfer_params` {"dora_key": KEY}; nothing is saved unless the
engine front-end asks for it before aborting the request (`request_export`: a flag file
KEY.export). Then, when the scheduler ends the request:

- source, scheduler: `request_finished` keeps the request's blocks (delay_free) and schedules
  a save of its computed tokens: num_computed_tokens minus any still in flight, i.e. prompt +
  generated - 1 (the last sampled token has not been fed);
- source, worker: before the next forward, those blocks of every layer go to KEY/ with the
  token ids (meta.json last, so its presence means complete); `get_finished` then frees them;
- destination, scheduler: a request whose params name {"dora_load": KEY} and whose prompt
  (prompt + generated) starts with the saved ids gets those tokens as externally computed
  (`get_num_new_matched_tokens`), at most all but its last token, which it feeds as the next
  decode step would have;
- destination, worker: before the forward, the saved blocks are copied into the blocks the
  scheduler gave it (`start_load_kv`), and the key's files are removed.

Only block-first cache layouts (per layer [num_blocks x k, ...], vLLM's CPU attention) are
supported; another layout is refused when the caches are registered. Loaded with
`kv_connector="DoraKVConnector"`, `kv_connector_module_path="dora.exec.engine.vllm_kv"`.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                KVConnectorRole)

CONNECTOR = "DoraKVConnector"
MODULE = "dora.exec.engine.vllm_kv"
META = "meta.json"


def request_export(store: str, key: str) -> None:
    """Ask the engine that runs request `key` to save its KV cache when it ends (call before aborting it)."""
    with open(os.path.join(store, key + ".export"), "w"):
        pass


def saved_ids(store: str, key: str) -> list[int] | None:
    """The token ids whose KV cache is saved under `key`, None while not (yet) saved."""
    try:
        with open(os.path.join(store, key, META)) as f:
            return list(json.load(f)["token_ids"])
    except FileNotFoundError:
        return None


def discard(store: str, key: str) -> None:
    """Remove what `key` left in the store (its flag and saved cache)."""
    shutil.rmtree(os.path.join(store, key), ignore_errors=True)
    try:
        os.remove(os.path.join(store, key + ".export"))
    except FileNotFoundError:
        pass


@dataclass
class _Meta(KVConnectorMetadata):
    loads: list[tuple[str, list[int], int]] = field(default_factory=list)  # (key, block ids, first saved block)
    saves: list[tuple[str, str, list[int], list[int]]] = field(default_factory=list)  # (req, key, blocks, token ids)


class DoraKVConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._block = vllm_config.cache_config.block_size
        self._store = self._kv_transfer_config.get_from_extra_config("store", "")
        if not self._store or not os.path.isdir(self._store):
            raise ValueError(f"{CONNECTOR}: kv_connector_extra_config 'store' {self._store!r} is not a directory")
        self._loads: dict[str, tuple[str, int, int]] = {}  # request id -> (key, tokens to have, computed locally)
        self._saves: list[tuple[str, str, list[int], list[int]]] = []
        self._kv: dict[str, torch.Tensor] = {}
        self._rows = 1  # cache rows per scheduler block (kernel blocks smaller than the block size)
        self._sent: set[str] = set()

    # ---- worker side ---------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        blocks = getattr(self._kv_cache_config, "num_blocks", 0)
        for name, t in kv_caches.items():
            if not blocks or t.shape[0] % blocks:
                raise RuntimeError(f"{CONNECTOR}: layer {name} has a KV cache of shape {tuple(t.shape)}, not "
                                   f"[num_blocks ({blocks}) x k, ...]; this connector moves block-first caches only")
            self._rows = t.shape[0] // blocks
        self._kv = kv_caches

    def _index(self, block_ids: list[int]) -> torch.Tensor:
        r = self._rows
        return torch.tensor([b * r + j for b in block_ids for j in range(r)], dtype=torch.long)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, _Meta)
        for req_id, key, block_ids, token_ids in meta.saves:
            d = os.path.join(self._store, key)
            os.makedirs(d, exist_ok=True)
            idx = self._index(block_ids)
            torch.save({name: kv[idx].clone() for name, kv in self._kv.items()}, os.path.join(d, "kv.pt"))
            with open(os.path.join(d, META + ".tmp"), "w") as f:
                json.dump({"token_ids": token_ids, "block_size": self._block}, f)
            os.replace(os.path.join(d, META + ".tmp"), os.path.join(d, META))
            self._sent.add(req_id)
        for key, block_ids, first in meta.loads:
            saved = torch.load(os.path.join(self._store, key, "kv.pt"))
            idx, r = self._index(block_ids), self._rows
            for name, kv in self._kv.items():
                kv[idx] = saved[name][first * r:(first + len(block_ids)) * r]
            discard(self._store, key)

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass  # loads complete in start_load_kv

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        pass  # saves happen once a request ends, from its held blocks

    def wait_for_save(self) -> None:
        pass

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        sent, self._sent = self._sent, set()
        return (sent or None), None

    # ---- scheduler side ------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        key = (request.kv_transfer_params or {}).get("dora_load")
        if not key:
            return 0, False
        saved = saved_ids(self._store, key)
        prompt = list(request.prompt_token_ids or [])
        if saved is None:
            return 0, False  # the engine front-end checked it exists; it reports the miss (num_cached_tokens)
        n, lim = 0, min(len(saved), len(prompt) - 1)
        while n < lim and prompt[n] == saved[n]:
            n += 1
        if n <= num_computed_tokens:
            return 0, False
        self._loads[request.request_id] = (key, n, num_computed_tokens)
        return n - num_computed_tokens, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens == 0:
            self._loads.pop(request.request_id, None)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = _Meta()
        for new in scheduler_output.scheduled_new_reqs:
            got = self._loads.pop(new.req_id, None)
            if got is not None:
                key, n, local = got
                first, last = local // self._block, -(-n // self._block)
                meta.loads.append((key, list(new.block_ids[0][first:last]), first))
        meta.saves, self._saves = self._saves, []
        return meta

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        key = (request.kv_transfer_params or {}).get("dora_key")
        if not key or not os.path.exists(os.path.join(self._store, key + ".export")):
            return False, None
        n = request.num_computed_tokens - (getattr(request, "num_in_flight_tokens", 0) or 0)
        self._saves.append((request.request_id, key, list(block_ids[:-(-n // self._block)]),
                            list(request.all_token_ids[:n])))
        return True, None
