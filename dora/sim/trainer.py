"""The simulated trainer: one step per Train action, then a version publication."""

from __future__ import annotations

from typing import Callable, Sequence

from dora.body import train_rows, trainer_row
from dora.eventlog import EventLog
from dora.sim.cost import CostModel
from dora.sim.order import TRAINER


class Trainer:
    """Steps take train_base_s + train_device_s_per_token * tokens / devices; publication
    takes publish_s (colocated: the weights stay on the devices, the reshard is paid by
    the instances' loads instead). Rollout instances lent to it (`lent`: their devices) train
    with it; a step on other devices than the last one starts trainer_resize_s late.

    Restarts (`restart_at`): a crash during a step loses it; the step is redone in full
    after `restart_s` from the last checkpoint, on the same data (no group trained twice or
    skipped). A crash during publication delays it to the restart; an idle trainer starts
    its next step no earlier than the restart."""

    def __init__(self, devices: int, cost: CostModel, colocated: bool, log: EventLog,
                 schedule: Callable[[float, int, Callable[[object], None]], None],
                 on_published: Callable[[int], None],
                 restart_at: Sequence[float] = (), restart_s: float = 0.0):
        self.devices = devices
        self.lent = 0  # devices of rollout instances lent to it
        self._last_devices = devices  # devices of the last step
        self.cost = cost
        self.colocated = colocated
        self.log = log
        self._schedule = schedule
        self._on_published = on_published
        self.version = 0
        self.busy = False
        self.steps_done = 0
        self.restart_s = restart_s
        self.down_until = 0.0  # restarting until then
        self.phase = ""  # "" idle | "train" | "publish"
        self.token = 0  # invalidates the end of a step or publication cut by a crash
        self.step: tuple[float, int, int] = (0.0, 0, 0)  # (duration, tokens, lent devices) of the step in progress
        self.speed = 1.0  # slowdown of the next step (a shared host's contention; set by the cluster)
        self.on_trained: Callable[[float], None] | None = None  # called when a step's compute ends
        for t in sorted(restart_at):
            self._schedule(float(t), TRAINER, lambda _, t=float(t): self._crash(t))

    def start(self, now: float, rows: list[tuple[int, int, int, int, int]]) -> None:
        """rows: (traj, prompt_id, version, prompt + response tokens, response tokens) per trajectory."""
        if self.busy:
            raise RuntimeError("policy bug: Train while the trainer is busy")
        self.busy = True
        tokens = sum(r[3] for r in rows)
        train_rows(self.log, now, self.version, rows, tokens)
        devices = self.devices + self.lent
        dt = self.cost.train_s(tokens, devices) * self.speed
        resize = self.cost.trainer_resize_s if devices != self._last_devices else 0.0
        self._last_devices = devices
        self.step = (dt, tokens, self.lent)
        self._begin_step(max(now, self.down_until) + resize)

    def _begin_step(self, t0: float) -> None:
        dt, tokens, _ = self.step
        self.phase = "train"
        tok = self.token
        end = t0 + dt
        self._schedule(end, TRAINER, lambda _: self._end(tok, end, dt, tokens))

    def _end(self, tok: int, now: float, dt: float, tokens: int) -> None:
        if tok != self.token:
            return
        lent = self.step[2]
        trainer_row(self.log, now, "train_end", self.version, tokens=tokens, dur_s=dt, busy_s=dt * (self.devices + lent))
        if lent:  # the share of that compute on lent rollout devices
            trainer_row(self.log, now, "train_lent", self.version, tokens=lent, busy_s=dt * lent)
        if self.on_trained is not None:
            self.on_trained(now)
        pub = 0.0 if self.colocated else self.cost.publish_s
        self._begin_publish(now + pub, pub)

    def _begin_publish(self, t: float, pub: float) -> None:
        self.phase = "publish"
        tok = self.token
        self._schedule(t, TRAINER, lambda _: self._publish(tok, t, pub))

    def _publish(self, tok: int, now: float, pub: float) -> None:
        if tok != self.token:
            return
        self.phase = ""
        self.version += 1
        self.steps_done += 1
        self.busy = False
        trainer_row(self.log, now, "publish", self.version, version=self.version, dur_s=pub)
        self._on_published(self.version)

    def _crash(self, now: float) -> None:
        back = now + self.restart_s
        self.down_until = max(self.down_until, back)
        phase = self.phase or "idle"
        trainer_row(self.log, now, "trainer_restart", self.version, dur_s=self.restart_s, detail=phase)
        if self.phase == "train":
            self.token += 1
            self._begin_step(self.down_until)  # redo the whole step from the checkpoint
        elif self.phase == "publish":
            self.token += 1
            pub = 0.0 if self.colocated else self.cost.publish_s
            self._begin_publish(self.down_until + pub, pub)
