"""`sync`: verl synchronous RL. Generate the whole batch with version i, train, load i+1 everywhere.

Mechanism (verl `RayPPOTrainer.fit`): the batch of B prompts x G samples is split into equal
contiguous chunks, one per rollout instance (the data-parallel split of
`generate_sequences`); the step waits for the last trajectory; the trainer updates; the new
weights are loaded on every instance before the next batch starts. `colocated` (default,
verl's hybrid engine) time-shares all devices between rollout and training; otherwise the
trainer has its own devices and idles during rollout.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from dora.sched.config import PolicyConfig
from dora.sched.policies.sync_config import SyncConfig
from dora.sched.policy import Policy
from dora.sched.state import GroupView, InstView


def contiguous_chunks(n_items: int, instances: list[InstView]) -> list[InstView]:
    """Assign items 0..n-1 to instances in equal contiguous chunks (first chunks one larger)."""
    k = len(instances)
    base, extra = divmod(n_items, k)
    out: list[InstView] = []
    for idx, inst in enumerate(instances):
        out.extend([inst] * (base + (1 if idx < extra else 0)))
    return out


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass policies
class SyncPolicy(Policy):
    name = "sync"

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        sc: SyncConfig = cfg.sync
        self.placement = "colocated" if sc.colocated else "disaggregated"
        self._waiting_loads = 0
        self._stranded: list[GroupView] = []  # groups that found no live instance

    def on_start(self) -> None:
        self.sample(self.B)

    def on_groups(self, groups: list[GroupView], reason: str) -> None:
        self.start_batch(groups, self.view.latest_version)

    def start_batch(self, groups: list[GroupView], version: int) -> None:
        """Split the batch's trajectories into equal contiguous chunks over alive instances."""
        insts = sorted(self.view.alive(), key=lambda i: i.id)
        if not insts:
            self._stranded.extend(groups)  # every instance is down: start on the first recovery
            return
        n = sum(g.size for g in groups)
        where = contiguous_chunks(n, insts)
        k = 0
        for g in groups:
            self.start_group(g, version, where[k:k + g.size])
            k += g.size

    def on_published(self, version: int) -> None:
        insts = self.view.alive()
        self._waiting_loads = len(insts)
        for inst in insts:
            self.load(inst, version)
        if not insts:
            self.sample(self.B)  # every instance is down: the batch starts on the first recovery

    def on_loaded(self, inst: InstView, version: int) -> None:
        self._waiting_loads -= 1
        if self._waiting_loads == 0:
            self.sample(self.B)

    def on_regenerate(self, g: GroupView) -> None:
        insts = sorted(self.view.alive(), key=lambda i: (i.load, i.id))
        if not insts:
            self._stranded.append(g)
            return
        self.start_group(g, self.view.latest_version, [insts[i % len(insts)] for i in range(g.size)])

    def on_instance_failed(self, inst: InstView, was_loading: int) -> None:
        if was_loading >= 0:
            self.on_loaded(inst, was_loading)  # the barrier does not wait for a dead instance

    def on_instance_recovered(self, inst: InstView) -> None:
        if self._stranded and self.view.latest_version in inst.versions:
            groups, self._stranded = self._stranded, []
            self.start_batch(groups, self.view.latest_version)
