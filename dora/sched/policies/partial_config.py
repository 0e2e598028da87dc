"""The `partial` policy's own knobs (`policy.partial.<knob>` in YAML and `--set`): the config
beside `partial.py`, in a module of its own because the policy files are compiled with mypyc,
which does not keep a compiled dataclass's `Literal` annotations (the config loader reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from dora.errors import too_small


@dataclass
class PartialConfig:
    """AReaL: admission control + interrupt-on-new-version."""

    max_concurrent_groups: int = 0  # AReaL max_concurrent_rollouts, in groups; 0 = decode slots / G
    strict_staleness: bool = True  # wait rather than train a group beyond η (False: AReaL's own rule, breaks C3)

    def validate(self) -> None:
        if self.max_concurrent_groups < 0:
            raise too_small("max_concurrent_groups", self.max_concurrent_groups, 0)
