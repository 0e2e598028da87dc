"""The `dora` policy's own knobs (`policy.dora.<knob>` in YAML and `--set`): the config
beside `dora.py`, in a module of its own because the policy files are compiled with mypyc,
which does not keep a compiled dataclass's `Literal` annotations (the config loader reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dora.errors import InputError, too_small


@dataclass
class DoraConfig:
    """DORA: multi-version streaming, tails spread and consolidated, cost-weighed."""

    spread_starts: bool = True  # light load: new groups spread over the instances about to serve, within KV memory
    spread_tails: bool = True  # a drained old-version instance hosts an at-risk tail of its version
    host_max: int = 8  # spread_tails: so may one with fewer than this many trajectories (1: drained ones only)
    consolidate: bool = True  # when slots are short, pack old-version instances onto peers (no tail at risk)
    run_length: bool = True  # no slots wanted for groups the run never trains (its step count, where the body gives it)
    repartition_load: float = 0.5  # consolidate an old-version instance with at most this share of its slots busy
    cohort_check: bool = True  # consolidation's cautious remainders checked against their version's running trajectories
    widen_max: float = 1.0  # consolidation's cautious remainders widened by how far late bets ran short, up to this (1: never, e.g. 1.5)
    migrate_kv: bool = False  # a migration ships the KV cache where that costs less than re-prefilling it
    predictor: Literal["history", "none"] = "history"  # remaining lengths: the run's own history, or as long again as run so far
    balance: Literal["slots", "predicted"] = "slots"  # dispatch: most free slots, or least predicted work per slot
    versions_per_instance: int = 1
    max_regenerations: int = 0  # stale aborts per group; after that the trainer waits for it
    tool_calls: bool = True  # a trajectory in a tool call counts as not decoding and lends its slot to new groups
    elastic_trainer: bool = False  # trainer devices generate while the trainer waits for data
    lend_trainer: bool = True  # drained rollout instances train while the trainer sets the pace (where the body can lend)

    def validate(self) -> None:
        if not 0 <= self.repartition_load <= 1:
            raise InputError(f"repartition_load: must be in [0, 1], got {self.repartition_load}")
        if self.host_max < 1:
            raise too_small("host_max", self.host_max, 1)
        if self.max_regenerations < 0:
            raise too_small("max_regenerations", self.max_regenerations, 0)
        if not self.widen_max >= 1:
            raise too_small("widen_max", self.widen_max, 1)
        if self.versions_per_instance < 1:
            raise too_small("versions_per_instance", self.versions_per_instance, 1)
