"""Shared machinery of the streaming policies (laminar, dora).

Admission: a group started now runs under the newest version i and is trained after the
groups already trained or training (T) and those untrained ahead of it (U), around trainer
version (T + U)/B. To stay within η it is admitted only while T + U < (i + η + 1)·B (the
cap of AReaL's staleness manager, counted in groups), and while the instances that take new
work have G free decode slots between them. Sampled groups that find no room wait in a
backlog and start as slots free up. Every group runs under the newest version at the moment
it starts.

Indexes (so that an event costs O(log instances), not O(instances), at cluster scale):
- the serving pool: instances that take new groups, their free slots in total, and a lazy
  heap ordered by `pool_key` (most free slots first by default) for placement;
- `old`: instances that do not hold the newest version, by version and load (LoadIndex),
  for draining, repack and repartition decisions.
"""

from __future__ import annotations

import heapq
from collections import deque

from mypy_extensions import mypyc_attr

from dora.sched.config import PolicyConfig
from dora.sched.loadindex import LoadIndex
from dora.sched.policy import Policy
from dora.sched.state import GroupView, InstView


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass policies
class StreamingPolicy(Policy):
    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        self.requested = 0  # groups asked for, not yet answered
        self.untrained = 0  # requested or sampled groups not yet trained
        self.backlog: deque[GroupView] = deque()  # sampled, waiting for slots
        self.inflight: dict[int, GroupView] = {}  # started, not complete (start order)
        self.pool: dict[int, InstView] = {}  # serving instances
        self.pool_free = 0  # free slots over the pool (each instance counted >= 0)
        self._heap: list[tuple[float, int, int]] = []  # (pool_key, id, stamp), lazily invalidated
        self._dirty: dict[int, InstView] = {}  # pool instances changed since the heap last saw them
        self.old = LoadIndex()  # alive, not loading, regular instances without the newest version
        self._admit_cap: int | None = None  # admission_cap(), kept until index_all

    # ---- subclass hooks -----------------------------------------------------------------------------
    def is_serving(self, inst: InstView) -> bool:
        """Takes new groups now: alive, not loading, holding the newest version."""
        return inst.alive and inst.loading < 0 and self.view.latest_version in inst.versions

    def pool_key(self, inst: InstView) -> float:
        """Placement order among serving instances (smallest first; ties: lowest id)."""
        return -inst.free_slots()

    def pick_cost(self, g: GroupView) -> float:
        """What one more sample of `g` adds to an instance (here: one slot)."""
        return 1.0

    def pick_step(self, inst: InstView, cost: float) -> float:
        """How much a pick of cost `cost` raises an instance's pool_key."""
        return cost

    def admission_cap(self) -> int:
        """Most untrained groups allowed now: (i + η + 1)·B minus groups trained or training.
        Read again only after `index_all` (the versions or the trainer's state changed)."""
        v = self.view
        done = v.steps_begun() * self.B
        return (v.latest_version + self.eta + 1) * self.B - done

    def predict_group(self, g: GroupView) -> float:
        """Predicted length of each sample of a group about to start (0: no prediction)."""
        return 0.0

    # ---- indexes ------------------------------------------------------------------------------------
    def index_all(self) -> None:
        self._admit_cap = None
        self.pool.clear()
        self.pool_free = 0
        self._dirty.clear()
        self.old.clear()
        heap = []
        latest = self.view.latest_version
        for inst in self.view.instances.values():  # _index(inst) for each, from empty indexes
            inst.watch = self._watch
            if self.is_serving(inst):
                self.pool[inst.id] = inst
                free = inst.max_seqs - len(inst.active)
                if free > 0:
                    self.pool_free += free
                    heap.append((self.pool_key(inst), inst.id, inst.stamp))
            elif self._is_old(inst, latest):
                self.old.add(inst, max(inst.versions))
        heapq.heapify(heap)
        self._heap = heap

    def index_instance(self, inst: InstView) -> None:
        self._index(inst)

    @staticmethod
    def _is_old(inst: InstView, latest: int) -> bool:
        """Belongs in `old`: alive, not loading, a regular instance without the newest version."""
        return inst.alive and inst.loading < 0 and not inst.elastic and latest not in inst.versions

    def _index(self, inst: InstView) -> None:
        serving = self.is_serving(inst)
        if serving != (inst.id in self.pool):
            free = max(inst.free_slots(), 0)
            if serving:
                self.pool[inst.id] = inst
                self.pool_free += free
                self._push(inst)
            else:
                del self.pool[inst.id]
                self.pool_free -= free
        if self._is_old(inst, self.view.latest_version):
            self.old.add(inst, max(inst.versions))
        else:
            self.old.discard(inst)

    def add_slots(self, inst: InstView, d: int) -> None:
        """The slots new groups may take on `inst` (its view's `max_seqs`) change by `d`."""
        load, s = len(inst.active), inst.max_seqs
        inst.max_seqs = s + d
        if inst.id in self.pool:
            self.pool_free += max(s + d - load, 0) - max(s - load, 0)
            inst.stamp += 1  # re-keyed in the placement heap
            self._dirty[inst.id] = inst

    def _watch(self, inst: InstView, old_load: int) -> None:
        """One trajectory came or went (InstView.watch): the load moved by one."""
        iid = inst.id
        if iid in self.pool:
            S, new = inst.max_seqs, len(inst.active)
            if new < S or old_load < S:  # free slots changed (an over-full instance counts as 0)
                self.pool_free += old_load - new
            self._dirty[iid] = inst  # re-keyed at the next placement
        elif iid in self.old.where:  # (a serving instance holds the newest version: never old)
            self.old.update(inst)

    def _push(self, inst: InstView) -> None:
        if inst.max_seqs > len(inst.active):  # free slots
            heap = self._heap
            heapq.heappush(heap, (self.pool_key(inst), inst.id, inst.stamp))
            if len(heap) > 4 * len(self.pool) + 64:
                self._heap = [(self.pool_key(i), i.id, i.stamp) for i in self.pool.values() if i.free_slots() > 0]
                heapq.heapify(self._heap)

    def _rekey_dirty(self) -> None:
        """Re-key in the heap the pool instances changed since it last saw them."""
        if self._dirty:
            for changed in self._dirty.values():
                if changed.id in self.pool:
                    self._push(changed)
            self._dirty.clear()

    def first_pick(self) -> InstView | None:
        """The serving instance `place` would give a group's first sample (None: no free slot)."""
        self._rekey_dirty()
        heap, pool = self._heap, self.pool
        while heap:
            key, iid, stamp = heap[0]
            inst = pool.get(iid)
            if inst is not None and inst.stamp == stamp and inst.max_seqs > len(inst.active):
                return inst
            heapq.heappop(heap)  # stale, or full
        return None

    def place(self, g: GroupView) -> list[InstView] | None:
        """G serving instances for the samples of `g`, each pick the smallest pool_key (then id),
        an instance taking at most its free slots; None when the pool lacks G free slots."""
        if self.pool_free < g.size:
            return None
        self._rekey_dirty()
        heap, pool = self._heap, self.pool
        cost = self.pick_cost(g)
        step = self.pick_step
        heappop, heappush = heapq.heappop, heapq.heappush
        picks: list[InstView] = []
        taken: dict[int, int] = {}
        back = []
        left = g.size
        while left:
            key, iid, stamp = heappop(heap)
            inst = pool.get(iid)
            if inst is None or inst.stamp != stamp:
                continue  # stale entry
            k = taken.get(iid, 0)
            if inst.max_seqs - len(inst.active) - k <= 0:
                back.append((key, iid, stamp))
                continue
            picks.append(inst)
            left -= 1
            taken[iid] = k + 1
            heappush(heap, (key + step(inst, cost), iid, stamp))
        for e in back:
            heapq.heappush(heap, e)
        return picks

    # ---- admission ------------------------------------------------------------------------------------
    def admit(self) -> None:
        """Start backlogged groups, then sample as many new ones as fit in free slots and the cap."""
        if self.backlog:
            self._start_backlog()
        room = self.pool_free // (self.G or 1) - len(self.backlog)
        if room > 0:  # (the cap is read only when the slots leave room)
            cap = self._admit_cap
            if cap is None:
                cap = self._admit_cap = self.admission_cap()
            if cap - self.untrained < room:
                room = cap - self.untrained
        if room > 0:
            self.requested += room
            self.untrained += room
            self.sample(room, "admit")

    def on_groups(self, groups: list[GroupView], reason: str) -> None:
        self.requested -= len(groups)
        self.backlog.extend(groups)
        self._start_backlog()

    def _start_backlog(self) -> None:
        v = self.view
        version = v.latest_version
        if version + self.eta < v.steps_begun():
            return  # (η = 0 while training) a group started now could never be trained within η
        while self.backlog:
            g = self.backlog[0]
            picks = self.place(g)
            if picks is None:
                return
            self.backlog.popleft()
            self.start_group(g, version, picks, self.predict_group(g))
            self.inflight[g.prompt_id] = g

    def on_regenerate(self, g: GroupView) -> None:
        self.inflight.pop(g.prompt_id, None)
        self.backlog.appendleft(g)

    def on_lost(self, traj: int, inst: int) -> None:
        super().on_lost(traj, inst)
        self.after_aborts()  # the group's other trajectories were aborted: some instances may be drained
        self.admit()  # the regenerated group starts as soon as the pool has room

    def after_aborts(self) -> None:
        """Aborts (not finishes) may have drained old-version instances; policies that switch
        drained instances to the newest version do it here."""

    def on_instance_recovered(self, inst: InstView) -> None:
        self.admit()

    # ---- group and trainer bookkeeping ------------------------------------------------------------
    def on_finished(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        if group_done is not None:
            self.inflight.pop(group_done.prompt_id, None)
        self.after_finish(traj, inst, group_done)
        cap = self._admit_cap
        if self.backlog or cap is None or cap > self.untrained:  # (else admit would do nothing)
            self.admit()

    def after_finish(self, traj: int, inst: InstView, group_done: GroupView | None) -> None: ...

    def train_batch(self, batch: list[GroupView]) -> None:
        super().train_batch(batch)
        self.untrained -= len(batch)
        self.admit()  # (groups regenerated by the batch choice start only now that it trains)

    def stalest_counts(self, n: int) -> dict[int, int]:
        """Groups per version of `stalest_first(n)`, in O(versions)."""
        out: dict[int, int] = {}
        by_version = self.view.buffer_by_version
        for v in sorted(by_version):
            k = min(n, len(by_version[v]))
            out[v] = k
            n -= k
            if n == 0:
                break
        return out

    def stalest_first(self, n: int) -> list[GroupView]:
        """n complete groups, oldest version first, then completion order."""
        out: list[GroupView] = []
        by_version = self.view.buffer_by_version
        for v in sorted(by_version):
            for g in by_version[v].values():
                if len(out) == n:
                    return out
                out.append(g)
        return out
