"""`partial`: AReaL fully asynchronous RL with interruptible (partial) rollout.

Mechanism (inclusionAI/AReaL):
- Admission (`StalenessManager.get_capacity`), counted in prompt groups:
      capacity = min(max_concurrent - running, (η + i + 1)·B - (accepted + running))
  with i the current version, `accepted` the cumulative count of completed groups and
  `running` the groups in flight. A new group is admitted while capacity > 0.
- Each sample is routed round-robin over the inference servers.
- On a new version the trainer pauses submission, every server aborts its in-flight
  requests, loads the weights and the client resubmits prompt + generated tokens: the KV is
  discarded, the prefix is prefilled again under the new version and generation continues
  (per-token versions: C1 is broken by design).
- A batch is the B finished groups that started earliest (`wait_results` sorts by start; a
  group regenerated after a failure counts from its restart).
  AReaL's paper states that staleness stays within η; to hold that per trajectory, the
  trainer here also waits while training would leave some group unable to be trained within
  η (`Policy.staleness_excess`; the "prioritise older trajectories" rule made strict).
  Staleness counts from a trajectory's first token. `strict_staleness=false` drops that
  wait: AReaL's own rule, which admission alone bounds only on average (C3 breaks).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from dora.sched.config import PolicyConfig
from dora.sched.policies.partial_config import PartialConfig
from dora.sched.policy import Policy
from dora.sched.state import GroupView, InstView


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass policies
class PartialPolicy(Policy):
    name = "partial"

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        pc: PartialConfig = cfg.partial
        self.max_concurrent = pc.max_concurrent_groups
        self.strict = pc.strict_staleness
        self._rr = 0
        self._loads: set[int] = set()  # instances still loading the newest version (submission paused)
        self._alive: list[InstView] = []  # alive instances by id (the round-robin order)
        self._alive_ids: set[int] = set()
        self._inflight: dict[int, GroupView] = {}  # running groups, in start order
        self._requested = 0  # groups asked for with SampleGroups, not yet answered
        self._stranded: list[GroupView] = []  # groups that found no live instance

    def index_all(self) -> None:
        self._alive = [i for i in sorted(self.view.instances.values(), key=lambda i: i.id) if i.alive]
        self._alive_ids = {i.id for i in self._alive}

    def index_instance(self, inst: InstView) -> None:
        if inst.alive != (inst.id in self._alive_ids):
            self.index_all()

    def on_start(self) -> None:
        if self.max_concurrent == 0:
            g = self.G or 1
            self.max_concurrent = max(1, self.view.total_slots() // g)
        self._admit()

    def capacity(self) -> int:
        v = self.view
        running = v.running_groups + self._requested
        conc = self.max_concurrent - running
        stale = (self.eta + v.latest_version + 1) * self.B - (v.accepted_groups + running)
        return min(conc, stale)

    def _admit(self) -> None:
        if self._loads:
            return  # submission paused during the weight update
        cap = self.capacity()
        if cap > 0:
            self._requested += cap
            self.sample(cap, "admit")

    def on_groups(self, groups: list[GroupView], reason: str) -> None:
        self._requested -= len(groups)
        for g in groups:
            self._start(g)

    def _start(self, g: GroupView) -> None:
        alive = self._alive
        if not alive:
            self._stranded.append(g)  # every instance is down: start on the first recovery
            return
        picks = []
        for _ in range(g.size):
            picks.append(alive[self._rr % len(alive)])
            self._rr += 1
        self.start_group(g, self.view.latest_version, picks)
        self._inflight[g.prompt_id] = g

    def on_finished(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        if group_done is not None:
            self._inflight.pop(group_done.prompt_id, None)
            self._admit()

    def ready_batch(self) -> list[GroupView] | None:
        """B finished groups, earliest-started first; wait while that would leave a group beyond η.
        Start order is the version a group started under, then its sampling time: a group
        regenerated after a failure counts from its restart (without regeneration this is
        the sampling order, as groups start when sampled)."""
        v = self.view
        if len(v.buffer) < self.B or (self.strict and self.any_overdue(self._inflight.values())):
            return None
        # the B first by (version, sampling time): check the versions' counts before sorting
        counts: dict[int, int] = {}
        need = self.B
        for ver in sorted(v.buffer_by_version):
            k = min(need, len(v.buffer_by_version[ver]))
            counts[ver] = k
            need -= k
            if need == 0:
                break
        if self.strict and not self.staleness_ok_counts(counts):
            return None
        batch: list[GroupView] = []
        for ver, k in counts.items():
            batch += sorted(v.buffer_by_version[ver].values(), key=lambda g: (g.t_sampled, g.prompt_id))[:k]
        return batch

    def on_published(self, version: int) -> None:
        insts = self.view.alive()
        self._loads = {i.id for i in insts}
        for inst in insts:
            self.load(inst, version, mode="interrupt")

    def on_loaded(self, inst: InstView, version: int) -> None:
        for t in inst.active.values():
            if t.version != version:
                t.version = version
                t.versions_seen += 1
        if version == self.view.latest_version and inst.id in self._loads:
            self._loads.discard(inst.id)  # (a load of an older version that outlived a step does not count)
            if not self._loads:
                self._admit()

    def on_regenerate(self, g: GroupView) -> None:
        self._inflight.pop(g.prompt_id, None)
        self._start(g)

    def on_instance_failed(self, inst: InstView, was_loading: int) -> None:
        if inst.id in self._loads:
            self._loads.discard(inst.id)  # its load will not complete; submission resumes without it
            if not self._loads:
                self._admit()

    def on_instance_recovered(self, inst: InstView) -> None:
        stranded, self._stranded = self._stranded, []
        for g in stranded:
            self._start(g)
        self._admit()
