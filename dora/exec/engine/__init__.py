"""Rollout engines behind one interface (base.RolloutEngine; its requests and results in records): vLLM and
transformers."""

from dora.exec.engine.base import RolloutEngine
from dora.exec.engine.records import (EngineBusyError, EngineConfig, EngineStateLost, EngineStats, GenRequest, GenResult,
                                      KVState, SamplingConfig)

__all__ = ["EngineBusyError", "EngineConfig", "EngineStateLost", "EngineStats", "GenRequest", "GenResult",
           "KVState", "RolloutEngine", "SamplingConfig", "make_engine"]


def make_engine(cfg: EngineConfig) -> RolloutEngine:
    """Build the engine `cfg.backend` names (imports its heavy dependencies only then), warmed up
    (`RolloutEngine.warm_up`)."""
    engine: RolloutEngine
    if cfg.backend == "vllm":
        from dora.exec.engine.vllm_engine import VllmEngine

        engine = VllmEngine(cfg)
    else:
        from dora.exec.engine.hf_engine import HfEngine

        engine = HfEngine(cfg)
    engine.warm_up()
    return engine
