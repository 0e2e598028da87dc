"""Simulator configuration: cluster shape, cost model, policy knobs, run length."""

from __future__ import annotations

from dataclasses import dataclass, field

from dora.errors import InputError, too_small
from dora.sched.config import PolicyConfig
from dora.sched.registry import check_run, names as policy_names
from dora.sim.cost import CostModel
from dora.sim.faults import FaultConfig
from dora.sim.imbalance import ImbalanceConfig
from dora.sim.weightsync import WeightSyncConfig



@dataclass
class ClusterConfig:
    """Rollout instances (each `devices_per_instance` devices, tensor-parallel) and trainer devices."""

    instances: int = 64
    devices_per_instance: int = 2
    max_seqs: int = 0  # decode slots per instance (0: derived from memory and the trace, dora.sim.memory)
    kv_tokens: int = 0  # KV-cache capacity per instance, tokens (0: derived from memory, dora.sim.memory)
    trainer_devices: int = 64
    hardware: str = "H800"  # the device and model whose memory sizes derived slots and KV (--hardware/--model)
    model: str = "qwen3-30b-a3b"

    def validate(self) -> None:
        if self.instances < 1:
            raise too_small("instances", self.instances, 1, "rollout instance")
        if self.devices_per_instance < 1:
            raise too_small("devices_per_instance", self.devices_per_instance, 1)
        if self.max_seqs < 0:
            raise too_small("max_seqs", self.max_seqs, 1, "decode slot",
                            fix="set it to 1 or more, or 0 to derive it from memory")
        from dora.sim.presets import HARDWARE, MODELS

        if self.hardware not in HARDWARE or self.model not in MODELS:
            raise InputError(f"hardware/model: {self.hardware!r} x {self.model!r} unknown; choose from "
                             f"{', '.join(HARDWARE)} and {', '.join(MODELS)}")
        if self.kv_tokens < 2 and self.kv_tokens != 0:
            raise too_small("kv_tokens", self.kv_tokens, 2, "tokens",
                            fix="set it to 2 or more, or 0 to derive it from memory")
        if self.trainer_devices < 1:
            raise too_small("trainer_devices", self.trainer_devices, 1)


@dataclass
class SimConfig:
    trace: str = "traces/moe_longtail.parquet"
    policies: list[str] = field(default_factory=lambda: list(policy_names()))
    steps: int = 20  # trainer steps to simulate (versions published)
    seed: int = 0  # MoE imbalance draws
    reference: bool = False  # one event per decode step (slow; for checking the fast engine)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    cost: CostModel = field(default_factory=CostModel)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    weights: WeightSyncConfig = field(default_factory=WeightSyncConfig)  # how versions reach the instances
    imbalance: ImbalanceConfig = field(default_factory=ImbalanceConfig)  # MoE slowdowns over time

    def validate(self) -> None:
        check_run(self.policies, self.steps, self.policy)
        if not 0 <= self.seed < 2 ** 63:
            raise InputError(f"seed: must be in [0, 2^63), got {self.seed}")
