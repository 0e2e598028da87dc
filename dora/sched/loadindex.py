"""Instances grouped by version and bucketed by load (active trajectories), kept current.

Policies use it to find drained, lightly loaded or busiest-with-room instances of a version
without scanning the cluster on every event: an update costs O(1), a query walks the load
buckets (at most max_seqs + 1 of them) instead of the instances.
"""

from __future__ import annotations

from dora.sched.state import InstView


class LoadIndex:
    def __init__(self) -> None:
        self.where: dict[int, tuple[int, int]] = {}  # instance id -> (version, load when indexed)
        self.buckets: dict[int, dict[int, dict[int, InstView]]] = {}  # version -> load -> {id: inst}
        self.free: dict[int, int] = {}  # version -> sum of free slots (never below 0 per instance)

    def __contains__(self, iid: int) -> bool:
        return iid in self.where

    def __len__(self) -> int:
        return len(self.where)

    def versions(self) -> list[int]:
        return sorted(self.buckets)

    def count(self, version: int) -> int:
        return sum(len(b) for b in self.buckets.get(version, {}).values())

    def add(self, inst: InstView, version: int) -> None:
        if inst.id in self.where:
            self.discard(inst)
        load = inst.load
        self.where[inst.id] = (version, load)
        self.buckets.setdefault(version, {}).setdefault(load, {})[inst.id] = inst
        self.free[version] = self.free.get(version, 0) + max(inst.max_seqs - load, 0)

    def discard(self, inst: InstView) -> None:
        at = self.where.pop(inst.id, None)
        if at is None:
            return
        version, load = at
        by_load = self.buckets[version]
        b = by_load[load]
        del b[inst.id]
        if not b:
            del by_load[load]
        self.free[version] -= max(inst.max_seqs - load, 0)
        if not by_load:
            del self.buckets[version]
            del self.free[version]

    def update(self, inst: InstView) -> None:
        """The instance's load changed: move it to its new bucket."""
        iid = inst.id
        version, old = self.where[iid]
        new = len(inst.active)
        if new == old:
            return
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
        self.where[iid] = (version, new)
        S = inst.max_seqs
        self.free[version] += (S - new if new < S else 0) - (S - old if old < S else 0)

    def at(self, version: int, load: int) -> list[InstView]:
        """Instances of `version` with exactly `load` active trajectories, by id."""
        b = self.buckets.get(version, {}).get(load)
        return sorted(b.values(), key=lambda i: i.id) if b else []

    def bucket(self, version: int, load: int):
        """Instances of `version` with exactly `load` active trajectories (any order)."""
        b = self.buckets.get(version, {}).get(load)
        return b.values() if b else ()

    def loads(self, version: int) -> list[int]:
        """The loads present among instances of `version`, ascending."""
        return sorted(self.buckets.get(version, {}))

    def members(self, version: int) -> list[InstView]:
        return [i for b in self.buckets.get(version, {}).values() for i in b.values()]
