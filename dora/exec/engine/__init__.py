"""Rollout engines behind one interface (base.RolloutEngine): vLLM and transformers."""

from dora.exec.engine.base import (EngineBusyError, EngineConfig, EngineStateLost, EngineStats, GenRequest, GenResult,
                                   KVState, RolloutEngine, SamplingConfig)

__all__ = ["EngineBusyError", "EngineConfig", "EngineStateLost", "EngineStats", "GenRequest", "GenResult",
           "KVState", "RolloutEngine", "SamplingConfig", "make_engine"]


def make_engine(cfg: EngineConfig) -> RolloutEngine:
    """Build the engine `cfg.backend` names (imports its heavy dependencies only then)."""
    if cfg.backend == "vllm":
        from dora.exec.engine.vllm_engine import VllmEngine

        return VllmEngine(cfg)
    from dora.exec.engine.hf_engine import HfEngine

    return HfEngine(cfg)
