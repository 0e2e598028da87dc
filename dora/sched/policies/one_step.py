"""`one_step`: verl one-step off-policy (StreamRL-style overlap). Staleness exactly 1.

Mechanism (verl `experimental/one_step_off_policy`): rollout and trainer on separate devices.
Step k: wait for batch k; sync the trainer's current weights to every instance; start
generating batch k+1 with them; train on batch k at the same time. So batch k+1 is made by
the weights from before step k's update, and generation never overlaps a weight sync.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from dora.sched.config import PolicyConfig
from dora.sched.policies.sync import contiguous_chunks
from dora.sched.policy import Policy
from dora.sched.state import GroupView, InstView


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass policies
class OneStepPolicy(Policy):
    name = "one_step"

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        self._gen: list[GroupView] = []  # batch being generated
        self._ready: list[GroupView] | None = None  # generated, waiting for the trainer
        self._waiting_loads = 0
        self._rollout_version = 0
        self._stranded: list[GroupView] = []  # groups that found no live instance of the rollout version

    def _usable(self, version: int | None = None) -> list[InstView]:
        """Live instances holding `version` (default: the rollout version)."""
        version = self._rollout_version if version is None else version
        return [i for i in self.view.alive() if version in i.versions]

    def on_start(self) -> None:
        self.sample(self.B)

    def on_groups(self, groups: list[GroupView], reason: str) -> None:
        self._gen = groups
        self._launch(groups)

    def _launch(self, groups: list[GroupView], version: int | None = None) -> None:
        version = self._rollout_version if version is None else version
        insts = sorted(self._usable(version), key=lambda i: i.id)
        if not insts:
            self._stranded.extend(groups)  # no live instance holds the rollout version
            return
        where = contiguous_chunks(sum(g.size for g in groups), insts)
        k = 0
        for g in groups:
            self.start_group(g, version, where[k:k + g.size])
            k += g.size

    def ready_batch(self) -> list[GroupView] | None:
        return None  # training is started explicitly in _advance, never by buffer size

    def on_finished(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        if group_done is not None and all(g.prompt_id in self.view.buffer for g in self._gen):
            self._ready, self._gen = self._gen, []
            self._advance()

    def on_published(self, version: int) -> None:
        self._advance()

    def _advance(self) -> None:
        """Batch k generated and trainer idle: sync weights, then start gen k+1 and train k."""
        if self._ready is None or self.view.trainer_busy or self._waiting_loads:
            return
        latest = self.view.latest_version
        if latest != self._rollout_version:
            insts = self.view.alive()
            self._waiting_loads = len(insts)
            for inst in insts:
                self.load(inst, latest)
            if insts:
                return
            self._rollout_version = latest  # every instance is down: they come back with `latest`
        self._start_step()

    def on_loaded(self, inst: InstView, version: int) -> None:
        self._waiting_loads -= 1
        if self._waiting_loads == 0:
            self._rollout_version = version
            self._start_step()

    def _start_step(self) -> None:
        batch, self._ready = self._ready, None
        assert batch is not None
        self.sample(self.B)  # batch k+1 (dispatched on GroupsSampled)
        self.train_batch(batch)

    def on_regenerate(self, g: GroupView) -> None:
        insts = sorted(self._usable(), key=lambda i: (i.load, i.id))
        if not insts:
            self._stranded.append(g)
            return
        self.start_group(g, self._rollout_version, [insts[i % len(insts)] for i in range(g.size)])

    def on_instance_failed(self, inst: InstView, was_loading: int) -> None:
        if was_loading >= 0:
            self.on_loaded(inst, was_loading)  # the barrier does not wait for a dead instance

    def on_instance_recovered(self, inst: InstView) -> None:
        # It holds the newest version. Groups stranded while every instance was down have not
        # started: they start on it under that version (staleness only shrinks). Otherwise it
        # idles until the next weight sync (which loads every live instance).
        if self._stranded:
            groups, self._stranded = self._stranded, []
            self._launch(groups, max(inst.versions))
