"""The scheduler's view of the cluster, kept up to date from events and its own actions.

Pure bookkeeping shared by every policy: instances (versions, active trajectories),
trajectories, prompt groups and the buffer of finished groups waiting for the trainer.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from dora.sched.costs import DecodeCost

# trajectory states
QUEUED_OR_RUNNING, MIGRATING, FINISHED, ABORTED = 0, 1, 2, 3
# group states
G_RUNNING, G_COMPLETE, G_TRAINING, G_TRAINED, G_ABANDONED = 0, 1, 2, 3, 4


@dataclass(slots=True)
class TrajView:
    id: int
    prompt_id: int
    sample_idx: int
    version: int
    instance: int  # where it runs, or is headed while migrating
    t_start: float  # time of dispatch (first segment)
    state: int = QUEUED_OR_RUNNING
    tokens: int = 0  # response length once finished
    versions_seen: int = 1  # >1 when generation continued under a newer version (partial)
    pred: float = 0.0  # predicted response length at dispatch (0 if the policy predicts nothing)


@dataclass(slots=True)
class GroupView:
    prompt_id: int
    size: int
    prompt_len: int
    version: int = -1
    t_sampled: float = 0.0
    trajs: list[int] = field(default_factory=list)
    finished: int = 0
    state: int = G_RUNNING
    attempts: int = 0
    t_complete: float = 0.0


@dataclass(slots=True)
class InstView:
    id: int
    max_seqs: int
    kv_tokens: int
    devices: int
    versions: set[int] = field(default_factory=set)
    loading: int = -1
    active: dict[int, TrajView] = field(default_factory=dict)  # queued or running here
    alive: bool = True
    elastic: bool = False
    lent: bool = False  # its devices train (LendInstance until InstanceReturned); not alive meanwhile
    load_mode: str = "drain"
    evict: int = -1
    pred_sum: float = 0.0  # sum of `pred` over active trajectories
    start_sum: float = 0.0  # sum of `t_start` over active trajectories
    stamp: int = 0  # bumped on every change of `active` (lets policies keep lazy heaps)
    watch: Callable[["InstView", int], None] | None = None  # called as watch(inst, old_load) after a change

    def add(self, t: TrajView) -> None:
        old = len(self.active)
        self.active[t.id] = t
        self.pred_sum += t.pred
        self.start_sum += t.t_start
        self.stamp += 1
        if self.watch is not None:
            self.watch(self, old)

    def remove(self, t: TrajView) -> None:
        active = self.active
        if active.pop(t.id, None) is not None:
            if active:
                self.pred_sum -= t.pred
                self.start_sum -= t.t_start
            else:
                self.pred_sum = self.start_sum = 0.0  # no drift from float sums
            self.stamp += 1
            if self.watch is not None:
                self.watch(self, len(active) + 1)

    @property
    def load(self) -> int:
        return len(self.active)

    def free_slots(self) -> int:
        return self.max_seqs - len(self.active)

    def settled(self) -> bool:
        """No trajectory is still in transit to this instance (it may be a migration source)."""
        return all(t.state == QUEUED_OR_RUNNING for t in self.active.values())


class ClusterView:
    """Bookkeeping common to all policies. Policies read it; `Policy` keeps it current."""

    def __init__(self) -> None:
        self.instances: dict[int, InstView] = {}
        self.trajs: list[TrajView] = []  # by id (ids are dense: 0, 1, 2, ...)
        self.groups: dict[int, GroupView] = {}
        self.buffer: OrderedDict[int, GroupView] = OrderedDict()  # complete groups, completion order
        self.buffer_by_version: dict[int, OrderedDict[int, GroupView]] = {}  # the same, per version
        self.open_versions: dict[int, int] = {}  # started, not yet training groups per version
        self.trainer_version = 0
        self.trainer_busy = False
        self.trainer_devices = 0
        self.latest_version = 0  # newest published version
        self.next_traj = 0
        self.running_groups = 0  # sampled and not complete (AReaL's "running")
        self.accepted_groups = 0  # completed (AReaL's "accepted", cumulative)
        self.cost = DecodeCost()  # the body's decode costs as given in ClusterStarted (else defaults)

    def steps_begun(self) -> int:
        """Trainer steps trained or training: the trainer's version, plus one while it trains."""
        return self.trainer_version + 1 if self.trainer_busy else self.trainer_version

    # ---- instances ---------------------------------------------------------------------------
    def total_slots(self) -> int:
        return sum(i.max_seqs for i in self.instances.values() if i.alive and not i.elastic)

    def alive(self) -> list[InstView]:
        return [i for i in self.instances.values() if i.alive]

    # ---- trajectories ------------------------------------------------------------------------
    def new_traj(self, g: GroupView, sample_idx: int, version: int, instance: int, now: float,
                 pred: float = 0.0) -> TrajView:
        t = TrajView(self.next_traj, g.prompt_id, sample_idx, version, instance, now, pred=pred)
        self.next_traj += 1
        self.trajs.append(t)
        self.instances[instance].add(t)
        g.trajs.append(t.id)
        return t

    def new_group_trajs(self, g: GroupView, version: int, instances: list[InstView], now: float,
                        pred: float = 0.0) -> int:
        """`new_traj` for each sample i of `g` on instances[i]; returns the first trajectory id
        (the others follow in sample order)."""
        first = tid = self.next_traj
        trajs, ids, pid = self.trajs, g.trajs, g.prompt_id
        for i in range(g.size):
            inst = instances[i]
            t = TrajView(tid, pid, i, version, inst.id, now, QUEUED_OR_RUNNING, 0, 1, pred)
            trajs.append(t)
            inst.add(t)
            ids.append(tid)
            tid += 1
        self.next_traj = tid
        return first

    def finish_traj(self, traj: int, tokens: int, now: float) -> GroupView | None:
        """Record a finished trajectory; return its group if that completed the group."""
        t = self.trajs[traj]
        state = t.state
        if state == ABORTED:
            return None  # finished while its abort was on the way: discarded
        live = state == QUEUED_OR_RUNNING or state == MIGRATING  # it may finish before a migration starts
        if live:
            self.instances[t.instance].remove(t)
        t.state = FINISHED
        t.tokens = tokens
        g = self.groups[t.prompt_id]
        # a live trajectory is in its group's current attempt (abandon_group drops the live ones)
        if g.state != G_RUNNING or (not live and traj not in g.trajs):
            return None
        g.finished += 1
        if g.finished == g.size:
            g.state = G_COMPLETE
            g.t_complete = now
            self.buffer[g.prompt_id] = g
            self.buffer_by_version.setdefault(g.version, OrderedDict())[g.prompt_id] = g
            self.running_groups -= 1
            self.accepted_groups += 1
            return g
        return None

    def drop_traj(self, traj: int) -> None:
        """Forget an aborted or lost trajectory (the body discards its tokens)."""
        t = self.trajs[traj]
        self.instances[t.instance].remove(t)
        t.state = ABORTED

    def move_traj(self, traj: int, dst: int) -> None:
        """Start moving a trajectory to `dst`: it holds a slot there from now on, so `dst`
        neither takes other work for that slot nor looks drained while it is in transit."""
        t = self.trajs[traj]
        self.instances[t.instance].remove(t)
        t.instance = dst
        t.state = MIGRATING
        self.instances[dst].add(t)

    def arrive_traj(self, traj: int) -> None:
        self.trajs[traj].state = QUEUED_OR_RUNNING

    # ---- groups ------------------------------------------------------------------------------
    def add_group(self, prompt_id: int, size: int, prompt_len: int, now: float) -> GroupView:
        g = GroupView(prompt_id, size, prompt_len, t_sampled=now)
        self.groups[prompt_id] = g
        self.running_groups += 1
        return g

    def abandon_group(self, g: GroupView) -> list[int]:
        """Abandon the current attempt of a group; return its still-active trajectory ids."""
        live = [tid for tid in g.trajs if self.trajs[tid].state in (QUEUED_OR_RUNNING, MIGRATING)]
        for tid in live:
            self.drop_traj(tid)
        if g.state == G_COMPLETE:
            self._unbuffer(g)
            self.running_groups += 1
            self.accepted_groups -= 1
        if g.version >= 0:
            self._close(g.version)
        g.trajs = []
        g.finished = 0
        g.state = G_RUNNING
        g.attempts += 1
        return live

    def open_group(self, g: GroupView, version: int) -> None:
        """The group starts under `version` (counted as open until it trains or is abandoned)."""
        g.version = version
        self.open_versions[version] = self.open_versions.get(version, 0) + 1

    def take_for_training(self, g: GroupView) -> None:
        """Move a complete group from the buffer to the trainer."""
        self._unbuffer(g)
        self._close(g.version)
        g.state = G_TRAINING

    def _unbuffer(self, g: GroupView) -> None:
        del self.buffer[g.prompt_id]
        b = self.buffer_by_version[g.version]
        del b[g.prompt_id]
        if not b:
            del self.buffer_by_version[g.version]

    def _close(self, version: int) -> None:
        left = self.open_versions[version] - 1
        if left:
            self.open_versions[version] = left
        else:
            del self.open_versions[version]

    def group_trajs(self, g: GroupView) -> list[int]:
        trajs = self.trajs
        return [tid for tid in g.trajs if trajs[tid].state == FINISHED]

    def leftovers(self) -> list[tuple[int, int, int, int, str]]:
        """What is still held at the end of a run, for the event log's `leftover` rows:
        (trajectory or -1 for a group not started, prompt_id, version, group size, state) for
        every live trajectory of each group in flight, complete or training."""
        names = {G_RUNNING: "running", G_COMPLETE: "complete", G_TRAINING: "training"}
        out: list[tuple[int, int, int, int, str]] = []
        for g in self.groups.values():
            state = names.get(g.state)
            if state is None:
                continue
            live = [tid for tid in g.trajs if self.trajs[tid].state != ABORTED]
            out.extend((tid, g.prompt_id, g.version, g.size, state) for tid in live or [-1])
        return out
