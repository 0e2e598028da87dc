"""Policy configuration: the shared knobs (η, B, G) and the built-in policies' own sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from dora.errors import InputError, too_small


@dataclass
class SyncConfig:
    colocated: bool = True  # verl hybrid engine: rollout and training time-share all devices


@dataclass
class PartialConfig:
    """AReaL: admission control + interrupt-on-new-version."""

    max_concurrent_groups: int = 0  # AReaL max_concurrent_rollouts, in groups; 0 = decode slots / G
    strict_staleness: bool = True  # wait rather than train a group beyond η (False: AReaL's own rule, breaks C3)

    def validate(self) -> None:
        if self.max_concurrent_groups < 0:
            raise too_small("max_concurrent_groups", self.max_concurrent_groups, 0)


@dataclass
class LaminarConfig:
    """Laminar: pull-when-drained weight refresh through relays, and repack of long tails."""

    repack: bool = True
    repack_occupancy: float = 0.25  # an instance below this share of its slots is under-occupied
    repack_interval_s: float = 5.0  # how often the rollout manager checks for repack
    repack_kv: bool = False  # repacked trajectories carry their KV (False: destination re-prefills)
    repack_kv_fill: float = 1.0  # a destination may end with at most this share of its KV cache in use
    repack_batch: int = 0  # a destination may end with at most this many sequences (0: its decode slots)

    def validate(self) -> None:
        if not 0 < self.repack_occupancy <= 1:
            raise InputError(f"repack_occupancy: must be in (0, 1], got {self.repack_occupancy}")
        if not 0 < self.repack_kv_fill <= 1:
            raise InputError(f"repack_kv_fill: must be in (0, 1], got {self.repack_kv_fill}")
        if self.repack_batch < 0:
            raise too_small("repack_batch", self.repack_batch, 0, "(0: the decode slots)")
        if self.repack_interval_s <= 0:
            raise too_small("repack_interval_s", self.repack_interval_s, 0, above=True)


@dataclass
class DoraConfig:
    """DORA: multi-version streaming, tails spread and consolidated with KV migration, cost-weighed."""

    spread_starts: bool = True  # light load: new groups spread over the instances about to serve, within KV memory
    spread_tails: bool = True  # a drained old-version instance hosts an at-risk tail of its version
    consolidate: bool = True  # when slots are short, pack old-version instances onto peers (no tail at risk)
    repartition_load: float = 0.5  # consolidate an old-version instance with at most this share of its slots busy
    widen_max: float = 1.5  # consolidation's cautious remainders widened by how far late bets ran short, up to this (1: never)
    migrate_kv: bool = True  # a migration ships the KV cache where that costs less than re-prefilling it
    predictor: Literal["history", "none"] = "history"  # remaining lengths: the run's own history, or as long again as run so far
    balance: Literal["slots", "predicted"] = "slots"  # dispatch: most free slots, or least predicted work per slot
    versions_per_instance: int = 1
    max_regenerations: int = 0  # stale aborts per group; after that the trainer waits for it
    elastic_trainer: bool = False  # trainer devices generate while the trainer waits for data

    def validate(self) -> None:
        if not 0 <= self.repartition_load <= 1:
            raise InputError(f"repartition_load: must be in [0, 1], got {self.repartition_load}")
        if self.max_regenerations < 0:
            raise too_small("max_regenerations", self.max_regenerations, 0)
        if not self.widen_max >= 1:
            raise too_small("widen_max", self.widen_max, 1)
        if self.versions_per_instance < 1:
            raise too_small("versions_per_instance", self.versions_per_instance, 1)


@dataclass
class PolicyConfig:
    """The knobs every policy shares (η, B, G) and one typed section per policy that has its own
    (`sections`, by policy name; read as `cfg.dora`). The section types are those registered
    with their policies (`dora.sched.registry.register`); in YAML and `--set` keys a section sits
    beside the shared knobs: `policy.dora.repartition_load`."""

    eta: int = 4  # staleness bound η: trained at trainer version i only if i - v <= η
    batch_size: int = 128  # B: prompt groups per training step
    group_size: int = 0  # G: samples per prompt; 0 = the trace's
    sections: dict[str, Any] = field(default_factory=dict)  # policy name -> its config; missing ones: defaults

    SECTION_TYPES: ClassVar[dict[str, type]] = {}  # filled by dora.sched.registry.register

    def __post_init__(self) -> None:
        for name in self.sections:
            if name not in self.SECTION_TYPES:
                raise InputError(f"{name}: no policy of that name has a config section; choose from "
                                 f"{', '.join(self.SECTION_TYPES)}")
        given = self.sections
        self.sections = {name: given[name] if given.get(name) is not None else cls()
                         for name, cls in self.SECTION_TYPES.items()}

    def __getattr__(self, name: str) -> Any:
        """A policy's section as an attribute (only called for names that are not fields)."""
        sections = self.__dict__.get("sections")
        if sections is None or name not in sections:
            raise AttributeError(f"PolicyConfig has no field or policy section {name!r}")
        return sections[name]

    @classmethod
    def section_types(cls) -> dict[str, type]:
        """For `dora.config`: the keys besides the fields, each built as a dataclass of its type."""
        return dict(cls.SECTION_TYPES)

    def validate(self) -> None:
        if self.eta < 0:
            raise too_small("eta", self.eta, 0, "(staleness bound in versions)")
        if self.batch_size < 1:
            raise too_small("batch_size", self.batch_size, 1, "prompt group")
        if self.group_size < 0:
            raise too_small("group_size", self.group_size, 1, "sample per prompt",
                            fix="set it to 1 or more, or 0 for the trace's")
