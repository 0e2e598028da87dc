"""Instances grouped by version and bucketed by load (active trajectories), kept current.

Policies use it to find drained, lightly loaded or busiest-with-room instances of a version
without scanning the cluster on every event: an update costs O(1), a query walks the load
buckets (at most max_seqs + 1 of them) instead of the instances.

`free[version]` tallies the slots below each instance's capacity, `cap(inst)` (default: its
decode slots; dora counts its packing cap instead), taken when the instance is added.
"""

from __future__ import annotations

from typing import Callable, Iterable

from dora.sched.state import InstView


def _slots(inst: InstView) -> int:
    return inst.max_seqs


class LoadIndex:
    def __init__(self, cap: Callable[[InstView], int] = _slots) -> None:
        self.cap = cap
        self.where: dict[int, list[int]] = {}  # instance id -> [version, load as indexed, cap]
        self.buckets: dict[int, dict[int, dict[int, InstView]]] = {}  # version -> load -> {id: inst}
        self.free: dict[int, int] = {}  # version -> sum of cap - load (never below 0 per instance)

    def __contains__(self, iid: int) -> bool:
        return iid in self.where

    def __len__(self) -> int:
        return len(self.where)

    def versions(self) -> list[int]:
        return sorted(self.buckets)

    def count(self, version: int) -> int:
        return sum(len(b) for b in self.buckets.get(version, {}).values())

    def clear(self) -> None:
        self.where.clear()
        self.buckets.clear()
        self.free.clear()

    def add(self, inst: InstView, version: int) -> None:
        if inst.id in self.where:
            self.discard(inst)
        load = inst.load
        cap = self.cap(inst)
        self.where[inst.id] = [version, load, cap]
        self.buckets.setdefault(version, {}).setdefault(load, {})[inst.id] = inst
        self.free[version] = self.free.get(version, 0) + max(cap - load, 0)

    def discard(self, inst: InstView) -> None:
        at = self.where.pop(inst.id, None)
        if at is None:
            return
        version, load, cap = at
        by_load = self.buckets[version]
        b = by_load[load]
        del b[inst.id]
        if not b:
            del by_load[load]
        self.free[version] -= max(cap - load, 0)
        if not by_load:
            del self.buckets[version]
            del self.free[version]

    def update(self, inst: InstView) -> None:
        """The instance's load changed: move it to its new bucket."""
        iid = inst.id
        at = self.where[iid]
        version, old, S = at
        new = len(inst.active)
        if new == old:
            return
        at[1] = new
        by_load = self.buckets[version]
        b = by_load[old]
        del b[iid]
        if not b:
            del by_load[old]
        nb = by_load.get(new)
        if nb is None:
            by_load[new] = {iid: inst}
        else:
            nb[iid] = inst
        if new < S or old < S:
            self.free[version] += (S - new if new < S else 0) - (S - old if old < S else 0)

    def at(self, version: int, load: int) -> list[InstView]:
        """Instances of `version` with exactly `load` active trajectories, by id."""
        b = self.buckets.get(version, {}).get(load)
        return sorted(b.values(), key=lambda i: i.id) if b else []

    def bucket(self, version: int, load: int) -> Iterable[InstView]:
        """Instances of `version` with exactly `load` active trajectories (any order)."""
        b = self.buckets.get(version, {}).get(load)
        return b.values() if b else ()

    def loads(self, version: int) -> list[int]:
        """The loads present among instances of `version`, ascending."""
        return sorted(self.buckets.get(version, {}))

    def members(self, version: int) -> list[InstView]:
        return [i for b in self.buckets.get(version, {}).values() for i in b.values()]
