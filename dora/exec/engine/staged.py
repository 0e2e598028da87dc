"""Collective weight sync on the engine side (`rollout.weight_sync=collective`): a version
arrives by a broadcast from the trainer and is staged (`receive_weights`); a later load applies
a staged version with no transfer (`load_staged`). Mixed into the backends ahead of
RolloutEngine; this default keeps the stage in the engine's own process (hf), vLLM's backend
keeps it in its worker process instead (vllm_engine.py, vllm_worker.py)."""

from __future__ import annotations

import threading
from typing import Any

from dora.errors import InputError
from dora.exec.weight_sync import WeightStage


def cut_last(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A copy whose last tensor lost its last element (an injected load failure)."""
    from dora.exec.faults import cut_last_tensor

    return list(cut_last_tensor(dict(items)).items())


class StagedLoads:
    """receive_weights / load_staged for a RolloutEngine (which defines `_load`, `_load_tensors`)."""

    _wstage: WeightStage | None = None
    _wstage_lock = threading.Lock()  # made on first use, by whichever thread comes first

    def _stage(self) -> WeightStage:
        with self._wstage_lock:
            if self._wstage is None:
                self._wstage = WeightStage()
            return self._wstage

    def receive_weights(self, spec: dict, rank: int, keep_from: int) -> dict:
        """Join the trainer's group `spec` as `rank`, receive the version it broadcasts and stage
        it; staged versions older than `keep_from` are dropped. Returns {version, bytes, seconds}.
        Generation goes on meanwhile (the receive runs in the caller's thread)."""
        device = getattr(self, "device", "cpu") if spec["backend"] == "nccl" else "cpu"
        if spec["backend"] == "nccl" and str(device).split(":")[0] != "cuda":
            raise InputError(f"rollout.weight_sync_backend: nccl needs the engines on CUDA, this one is on {device}; "
                             "set rollout.weight_sync_backend=gloo")
        return self._stage().receive(spec, rank, keep_from, device)

    def staged_versions(self) -> list[int]:
        return self._stage().versions()

    def load_staged(self, version: int, mode: str = "drain", cut_last_tensor: bool = False) -> float:
        """Load a staged version (no transfer). `cut_last_tensor`: injected failure part-way.
        Returns the seconds the swap took."""
        return self._load(version, "collective", (version, cut_last_tensor), mode)  # type: ignore[attr-defined]

    def _load_staged(self, payload: tuple[int, bool]) -> None:
        version, cut = payload
        stage = self._stage()
        items = stage.get(version)
        self._load_tensors(cut_last(items) if cut else items)  # type: ignore[attr-defined]
        stage.loaded_version(version)
