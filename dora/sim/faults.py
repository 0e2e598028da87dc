"""Faults in the simulated cluster: instance failures (explicit or drawn from an MTBF),
stragglers, failed weight loads and trainer restarts.

- An instance that fails loses everything on it: running and queued trajectories (`lost`
  rows; the policy gets TrajectoryLost and regenerates their groups), a weight load in
  progress, trajectories migrating to it. It comes back `repair_s` later holding the
  trainer's newest published version (the repair includes fetching the weights).
- `mtbf_s` > 0: each rollout instance fails after an exponential time with that mean,
  counted from the start of the run and again from each recovery (seeded by `seed`).
- Stragglers: a `straggler_fraction` of the rollout instances, drawn once, run
  `straggler_slowdown` times slower (on top of the MoE imbalance).
- A weight load fails with probability `load_fail_prob` and is retried (another full load
  time, a `load_fail` row); the instance never serves a half-loaded version.
- `trainer_restart_at`: the trainer crashes at these times; a step in progress is redone
  from the last checkpoint after `trainer_restart_s` (its data stays in the buffer, so no
  group is trained twice or skipped); an idle trainer is unavailable for `trainer_restart_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dora.errors import InputError, too_small


@dataclass
class FaultConfig:
    mtbf_s: float = 0.0  # mean time between failures per rollout instance, simulated s (0: none)
    repair_s: float = 600.0  # failure -> instance serving again (restart + weight fetch)
    fail_at: list[list[float]] = field(default_factory=list)  # explicit [[time_s, instance], ...]
    straggler_fraction: float = 0.0  # share of rollout instances that are slow
    straggler_slowdown: float = 1.0  # their slowdown factor (>= 1)
    load_fail_prob: float = 0.0  # probability that a weight load fails and is retried
    trainer_restart_at: list[float] = field(default_factory=list)  # trainer crash times, simulated s
    trainer_restart_s: float = 120.0  # crash -> trainer back from its last checkpoint

    def validate(self) -> None:
        if self.mtbf_s < 0:
            raise too_small("mtbf_s", self.mtbf_s, 0, "(0 = no drawn failures)")
        if self.repair_s <= 0:
            raise too_small("repair_s", self.repair_s, 0, "seconds", above=True)
        for k, item in enumerate(self.fail_at):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise InputError(f"fail_at[{k}]: expected [time_s, instance], got {item!r}")
            t, i = item
            if t < 0 or i < 0 or i != int(i):
                raise InputError(f"fail_at[{k}]: expected [time_s >= 0, instance id >= 0], got {item!r}")
        if not 0 <= self.straggler_fraction <= 1:
            raise InputError(f"straggler_fraction: must be in [0, 1], got {self.straggler_fraction}")
        if self.straggler_slowdown < 1:
            raise too_small("straggler_slowdown", self.straggler_slowdown, 1)
        if not 0 <= self.load_fail_prob < 1:
            raise InputError(f"load_fail_prob: must be in [0, 1), got {self.load_fail_prob}")
        if any((not isinstance(t, (int, float))) or t < 0 for t in self.trainer_restart_at):
            raise InputError(f"trainer_restart_at: times must be >= 0, got {self.trainer_restart_at}; give times of 0 "
                             "seconds or more")
        if self.trainer_restart_s <= 0:
            raise too_small("trainer_restart_s", self.trainer_restart_s, 0, "seconds", above=True)


class FaultDraws:
    """The random side of the faults, one stream per kind so that turning one on does not
    change the draws of another."""

    def __init__(self, cfg: FaultConfig, seed: int):
        self.cfg = cfg
        self._fail = np.random.default_rng([seed, 1])
        self._load = np.random.default_rng([seed, 2])

    def time_to_failure(self) -> float:
        return float(self._fail.exponential(self.cfg.mtbf_s))

    def load_fails(self) -> bool:
        return self.cfg.load_fail_prob > 0 and bool(self._load.random() < self.cfg.load_fail_prob)


def straggler_factors(cfg: FaultConfig, n: int, seed: int) -> np.ndarray:
    """Per-instance straggler slowdown: `straggler_slowdown` on a random share, else 1."""
    out = np.ones(n)
    k = int(round(cfg.straggler_fraction * n))
    if k and cfg.straggler_slowdown > 1:
        idx = np.random.default_rng([seed, 3]).choice(n, size=k, replace=False)
        out[idx] = cfg.straggler_slowdown
    return out
