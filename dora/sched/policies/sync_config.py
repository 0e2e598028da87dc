"""The `sync` policy's own knobs (`policy.sync.<knob>` in YAML and `--set`): the config
beside `sync.py`, in a module of its own because the policy files are compiled with mypyc,
which does not keep a compiled dataclass's `Literal` annotations (the config loader reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SyncConfig:
    colocated: bool = True  # verl hybrid engine: rollout and training time-share all devices
