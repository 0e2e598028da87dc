"""The simulated trainer: one step per Train action, then a version publication."""

from __future__ import annotations

from typing import Callable

from dora.eventlog import EventLog
from dora.sim.cost import CostModel


class Trainer:
    """Steps take train_base_s + train_device_s_per_token * tokens / devices; publication
    takes publish_s (colocated: the weights stay on the devices, the reshard is paid by
    the instances' loads instead)."""

    def __init__(self, devices: int, cost: CostModel, colocated: bool, log: EventLog,
                 schedule: Callable[[float, int, Callable[[object], None]], None],
                 on_published: Callable[[int], None]):
        self.devices = devices
        self.cost = cost
        self.colocated = colocated
        self.log = log
        self._schedule = schedule
        self._on_published = on_published
        self.version = 0
        self.busy = False
        self.steps_done = 0

    def start(self, now: float, rows: list[tuple[int, int, int, int, int]]) -> None:
        """rows: (traj, prompt_id, version, prompt + response tokens, response tokens) per trajectory."""
        if self.busy:
            raise RuntimeError("policy bug: Train while the trainer is busy")
        self.busy = True
        tokens = sum(r[3] for r in rows)
        code, tv = self.log.code("train"), self.version
        self.log.extend([(now, code, -1, traj, pid, ver, tv, rtok, 0.0, 0.0, 0.0) for traj, pid, ver, _, rtok in rows])
        self.log.add(now, "train_start", trainer_version=self.version, tokens=tokens)
        dt = self.cost.train_s(tokens, self.devices)
        end = now + dt
        self._schedule(end, 3, lambda _: self._end(end, dt, tokens))

    def _end(self, now: float, dt: float, tokens: int) -> None:
        self.log.add(now, "train_end", trainer_version=self.version, tokens=tokens, dur_s=dt,
                     busy_s=dt * self.devices)
        pub = 0.0 if self.colocated else self.cost.publish_s
        t = now + pub
        self._schedule(t, 3, lambda _: self._publish(t, pub))

    def _publish(self, now: float, pub: float) -> None:
        self.version += 1
        self.steps_done += 1
        self.busy = False
        self.log.add(now, "publish", version=self.version, trainer_version=self.version, dur_s=pub)
        self._on_published(self.version)
