"""A rollout engine in its own Ray actor process: a thin pass-through to RolloutEngine.

The actor is threaded (max_concurrency > 1) so a blocking `poll(timeout)` does not hold up
`submit`/`abort` from the orchestrator; the engine itself is thread-safe.

    actor = remote_engine(EngineConfig(model=path, backend="vllm"), num_gpus=1)
    ray.get(actor.ready.remote())
    actor.submit.remote([GenRequest(...)]); results = ray.get(actor.poll.remote(0.1))
"""

from __future__ import annotations

from typing import Any

from dora.exec.engine import EngineConfig, GenRequest, GenResult, KVState, make_engine


class EngineActor:
    """Ray actor body (wrapped with ray.remote by `remote_engine`)."""

    def __init__(self, cfg: EngineConfig, instance: int = 0):
        self.instance = instance
        self.engine = make_engine(cfg)

    def ready(self) -> dict[str, Any]:
        """Blocks until the engine is up; its backend, version and start-up seconds."""
        return {"instance": self.instance, "backend": self.engine.backend, "version": self.engine.version,
                "startup_s": self.engine.stats.startup_s}

    def submit(self, reqs: list[GenRequest]) -> None:
        self.engine.submit_many(reqs)

    def poll(self, timeout: float = 0.0, max_results: int | None = None) -> list[GenResult]:
        return self.engine.poll(timeout=timeout, max_results=max_results)

    def abort(self, request_ids: list[str]) -> list[GenResult | None]:
        return [self.engine.abort(r) for r in request_ids]

    def kv_migration(self) -> bool:
        """Whether this engine can move a request with its KV cache (export_kv / import_kv)."""
        return self.engine.kv_migration

    def export_kv(self, request_id: str) -> KVState | None:
        return self.engine.export_kv(request_id)

    def import_kv(self, state: KVState) -> None:
        self.engine.import_kv(state)

    def peek(self, request_id: str) -> GenResult | None:
        return self.engine.peek(request_id)

    def load_weights(self, version: int, tensors: dict[str, Any], mode: str = "drain") -> float:
        return self.engine.load_weights(version, tensors, mode=mode)  # type: ignore[arg-type]

    def load_checkpoint(self, version: int, path: str, mode: str = "drain") -> float:
        return self.engine.load_checkpoint(version, path, mode=mode)  # type: ignore[arg-type]

    def receive_weights(self, spec: dict, rank: int, keep_from: int) -> dict:
        """Collective weight sync: stage the version the trainer broadcasts to group `spec`."""
        return self.engine.receive_weights(spec, rank, keep_from)  # type: ignore[attr-defined]

    def load_staged(self, version: int, mode: str = "drain", cut_last_tensor: bool = False) -> float:
        return self.engine.load_staged(version, mode, cut_last_tensor)  # type: ignore[attr-defined]

    def version(self) -> int:
        return self.engine.version

    def running_ids(self) -> list[str]:
        return self.engine.running_ids()

    def kv_in_use(self) -> int:
        return self.engine.kv_in_use()

    def stats(self) -> dict[str, Any]:
        return self.engine.get_stats()

    def close(self) -> None:
        self.engine.close()


def remote_engine(cfg: EngineConfig, *, instance: int = 0, num_cpus: float = 1, num_gpus: float = 0,
                  max_concurrency: int = 8, **options: Any):
    """Start an EngineActor; returns its handle (call `.ready.remote()` to wait for start-up).

    On GPU give num_gpus=1 (Ray sets CUDA_VISIBLE_DEVICES for the actor; vLLM and the hf
    backend then use that device). Extra `options` go to ray's `.options()` (name, runtime_env, ...).
    """
    import ray

    cls = ray.remote(EngineActor)
    return cls.options(num_cpus=num_cpus, num_gpus=num_gpus, max_concurrency=max_concurrency,
                       **options).remote(cfg, instance)
