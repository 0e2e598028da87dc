"""The `laminar` policy's own knobs (`policy.laminar.<knob>` in YAML and `--set`): the config
beside `laminar.py`, in a module of its own because the policy files are compiled with mypyc,
which does not keep a compiled dataclass's `Literal` annotations (the config loader reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from dora.errors import InputError, too_small


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
