"""Collective weight sync on the engine side (`rollout.weight_sync=collective`): a version
arrives by a broadcast from the trainer and is staged (`receive_weights`); a later load applies
a staged version with no transfer (`load_staged`). Mixed into the backends ahead of
RolloutEngine; this default keeps the stage in the engine's own process (hf), vLLM's backend
keeps it in its worker process instead (vllm_engine.py, vllm_worker.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dora.errors import InputError
from dora.exec.weight_sync import WeightStage


def cut_last(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A copy whose last tensor lost its last element (an injected load failure)."""
    from dora.exec.faults import cut_last_tensor

    return list(cut_last_tensor(dict(items)).items())


def apply_staged(stage: WeightStage, version: int, cut: bool, load: Callable[[list[tuple[str, Any]]], Any]) -> int:
    """Load the staged `version` through `load` (cut short first when `cut`: an injected failure),
    then mark it loaded. Returns the tensor count."""
    items = stage.get(version)
    load(cut_last(items) if cut else items)
    stage.loaded_version(version)
    return len(items)


class StageHolder:
    """The process's WeightStage, made on first use (by whichever thread comes first). Mixed into
    the engines and into vLLM's worker (vllm_worker.py): dora-prefixed names, to stay clear of
    the worker's own."""

    _dora_wstage: WeightStage | None = None
    _dora_wstage_lock = threading.Lock()

    def _dora_weight_stage(self) -> WeightStage:
        with self._dora_wstage_lock:
            if self._dora_wstage is None:
                self._dora_wstage = WeightStage()
            return self._dora_wstage


class StagedLoads(StageHolder):
    """receive_weights / load_staged for a RolloutEngine (which defines `_load`, `_load_tensors`)."""

    def receive_weights(self, spec: dict, rank: int, keep_from: int) -> dict:
        """Join the trainer's group `spec` as `rank`, receive the version it broadcasts and stage
        it; staged versions older than `keep_from` are dropped. Returns {version, bytes, seconds}.
        Generation goes on meanwhile (the receive runs in the caller's thread)."""
        device = getattr(self, "device", "cpu") if spec["backend"] == "nccl" else "cpu"
        if spec["backend"] == "nccl" and str(device).split(":")[0] != "cuda":
            raise InputError(f"rollout.weight_sync_backend: nccl needs the engines on CUDA, this one is on {device}; "
                             "set rollout.weight_sync_backend=gloo")
        return self._dora_weight_stage().receive(spec, rank, keep_from, device)

    def staged_versions(self) -> list[int]:
        return self._dora_weight_stage().versions()

    def load_staged(self, version: int, mode: str = "drain", cut_last_tensor: bool = False) -> float:
        """Load a staged version (no transfer). `cut_last_tensor`: injected failure part-way.
        Returns the seconds the swap took."""
        return self._load(version, "collective", (version, cut_last_tensor), mode)  # type: ignore[attr-defined]

    def _load_staged(self, payload: tuple[int, bool]) -> None:
        version, cut = payload
        apply_staged(self._dora_weight_stage(), version, cut, self._load_tensors)  # type: ignore[attr-defined]
