"""LoadIndex and the streaming policies' serving pool stay equal to a recount from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dora.sched.config import PolicyConfig
from dora.sched.loadindex import LoadIndex
from dora.sched.policies.laminar import LaminarPolicy
from dora.sched.state import InstView, TrajView

OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "move", "drop", "readd"]), st.integers(0, 5),
                         st.integers(0, 3)), max_size=80)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, cap=st.sampled_from([0, 1, 2, 5]))
def test_load_index_matches_recount(ops, cap):
    """cap 0: the default capacity (decode slots); else LoadIndex(cap=...) tallies cap - load."""
    idx = LoadIndex(cap=lambda i: cap) if cap else LoadIndex()
    slots = (lambda i: cap) if cap else (lambda i: i.max_seqs)
    insts = [InstView(i, 4, 1000, 1) for i in range(6)]
    indexed: dict[int, int] = {}
    next_id = 0
    for inst in insts:
        inst.watch = lambda i, old: idx.update(i) if i.id in idx else None
    for op, k, ver in ops:
        inst = insts[k]
        if op == "add":
            inst.add(TrajView(next_id, 0, 0, ver, k, 0.0))
            next_id += 1
        elif op == "remove" and inst.active:
            inst.remove(next(iter(inst.active.values())))
        elif op == "drop":
            idx.discard(inst)
            indexed.pop(k, None)
        elif op in ("move", "readd"):
            idx.add(inst, ver)
            indexed[k] = ver
        for v in set(indexed.values()) | set(idx.versions()):
            members = [insts[i] for i, vv in indexed.items() if vv == v]
            assert sorted(i.id for i in idx.members(v)) == sorted(i.id for i in members)
            assert idx.free[v] == sum(max(slots(i) - i.load, 0) for i in members)
            for load in idx.loads(v):
                assert [i.id for i in idx.at(v, load)] == sorted(i.id for i in members if i.load == load)


def test_pool_places_on_most_free_slots_first():
    """Placement = the old full-scan rule: each sample to the instance with most free slots, ties lowest id."""
    from dora.sched import events as E

    p = LaminarPolicy(PolicyConfig(eta=2, batch_size=1, group_size=3))
    specs = tuple(E.InstanceSpec(i, 4, 10_000) for i in range(3))
    p.handle(E.ClusterStarted(specs, 1), 0.0)
    v = p.view
    v.instances[0].add(TrajView(10_000, 0, 0, 0, 0, 0.0))  # instance 0: 3 free, 1 and 2: 4 free
    g = v.add_group(5, 3, 8, 0.0)
    picks = p.place(g)
    assert [i.id for i in picks] == [1, 2, 0]
    assert p.pool_free == sum(i.free_slots() for i in v.instances.values())
