"""Shared machinery of the streaming policies (laminar, dora).

Admission: a group started now runs under the newest version i and is trained after the
groups already trained or training (T) and those untrained ahead of it (U), around trainer
version (T + U)/B. To stay within η it is admitted only while T + U < (i + η + 1)·B (the
cap of AReaL's staleness manager, counted in groups), and while the instances that take new work have G free decode slots between them. Sampled
groups that find no room wait in a backlog and start as slots free up. Every group runs
under the newest version at the moment it starts.
"""

from __future__ import annotations

import heapq
from collections import deque

from dora.sched.policy import Policy
from dora.sched.state import GroupView, InstView


def spread(g_size: int, insts: list[InstView]) -> list[InstView] | None:
    """G samples over instances, each to the one with most free slots (ties: lowest id)."""
    heap = [(-i.free_slots(), i.id, i) for i in insts if i.free_slots() > 0]
    if sum(-h[0] for h in heap) < g_size:
        return None
    heapq.heapify(heap)
    picks: list[InstView] = []
    for _ in range(g_size):
        negf, iid, inst = heapq.heappop(heap)
        picks.append(inst)
        if negf + 1 < 0:
            heapq.heappush(heap, (negf + 1, iid, inst))
    return picks


class StreamingPolicy(Policy):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.requested = 0  # groups asked for, not yet answered
        self.untrained = 0  # requested or sampled groups not yet trained
        self.backlog: deque[GroupView] = deque()  # sampled, waiting for slots
        self.inflight: dict[int, GroupView] = {}  # started, not complete (start order)

    # ---- subclass hooks -----------------------------------------------------------------------------
    def serving(self) -> list[InstView]:
        """Instances that take new groups now: alive, not loading, holding the newest version."""
        latest = self.view.latest_version
        return [i for i in self.view.instances.values() if i.alive and i.loading < 0 and latest in i.versions]

    def place(self, g: GroupView, insts: list[InstView]) -> list[InstView] | None:
        return spread(g.size, insts)

    def admission_cap(self) -> int:
        """Most untrained groups allowed now: (i + η + 1)·B minus groups trained or training."""
        v = self.view
        done = (v.trainer_version + (1 if v.trainer_busy else 0)) * self.B
        return (v.latest_version + self.eta + 1) * self.B - done

    def predict_group(self, g: GroupView) -> float:
        """Predicted length of each sample of a group about to start (0: no prediction)."""
        return 0.0

    # ---- admission ------------------------------------------------------------------------------------
    def admit(self) -> None:
        """Start backlogged groups, then sample as many new ones as fit in free slots and the cap."""
        insts = self.serving()
        self._start_backlog(insts)
        free = sum(max(i.free_slots(), 0) for i in insts)
        room = min(free // max(self.G, 1) - len(self.backlog), self.admission_cap() - self.untrained)
        if room > 0:
            self.requested += room
            self.untrained += room
            self.sample(room, "admit")

    def on_groups(self, groups: list[GroupView], reason: str) -> None:
        self.requested -= len(groups)
        self.backlog.extend(groups)
        self._start_backlog(self.serving())

    def _start_backlog(self, insts: list[InstView]) -> None:
        version = self.view.latest_version
        while self.backlog:
            g = self.backlog[0]
            picks = self.place(g, insts)
            if picks is None:
                return
            self.backlog.popleft()
            self.start_group(g, version, picks, self.predict_group(g))
            self.inflight[g.prompt_id] = g

    def on_regenerate(self, g: GroupView) -> None:
        self.inflight.pop(g.prompt_id, None)
        self.backlog.appendleft(g)

    # ---- group and trainer bookkeeping ------------------------------------------------------------
    def on_finished(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        if group_done is not None:
            self.inflight.pop(group_done.prompt_id, None)
        self.after_finish(traj, inst, group_done)
        self.admit()

    def after_finish(self, traj: int, inst: InstView, group_done: GroupView | None) -> None: ...

    def train_batch(self, batch: list[GroupView]) -> None:
        super().train_batch(batch)
        self.untrained -= len(batch)

    def stalest_first(self, n: int) -> list[GroupView]:
        """n complete groups, oldest version first, then completion order."""
        return sorted(self.view.buffer.values(), key=lambda g: (g.version, g.t_complete, g.prompt_id))[:n]
