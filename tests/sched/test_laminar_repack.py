"""Laminar's repack, hand-computed: KV-bounded best fit of whole under-occupied instances."""

from __future__ import annotations

from dora.config import build
from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.config import PolicyConfig
from dora.sched.policies.laminar import LaminarPolicy

# instance -> trajectories on it; every instance: 8 slots, 1000 KV tokens, version 0 (now old)
LOADS = {0: 1, 1: 2, 2: 6, 3: 6}
KV = (300, 500, 600, 200)


def _policy(**laminar) -> tuple[LaminarPolicy, dict[int, list[int]]]:
    cfg = build(PolicyConfig, {"batch_size": 64, "group_size": 1, "eta": 2,
                               "laminar": {"repack_occupancy": 0.25, **laminar}})
    pol = LaminarPolicy(cfg)
    specs = tuple(E.InstanceSpec(i, 8, 1000) for i in LOADS)
    pol.handle(E.ClusterStarted(specs, 1), 0.0)  # asks for groups; none are given
    v = pol.view
    trajs: dict[int, list[int]] = {i: [] for i in LOADS}
    pid = 0
    for inst, n in LOADS.items():
        for _ in range(n):
            g = v.add_group(pid, 1, 10, 0.0)
            v.open_group(g, 0)
            trajs[inst].append(v.new_traj(g, 0, 0, inst, 0.0).id)
            pid += 1
    v.latest_version = 1  # version 1 is out: every instance is ramping down on version 0
    pol.index_all()
    return pol, trajs


def test_sources_go_least_kv_first_to_the_destination_that_ends_fullest():
    pol, trajs = _policy()
    out = pol.handle(E.KVRead((0, 1, 2, 3), KV), 1.0)
    # source 0 (300 KV): 1 -> 800, 2 -> 900, 3 -> 500: instance 2 ends fullest.
    # source 1 (500 KV): 2 would hold 1400 > 1000; 3 ends at 700 with 8 sequences (= slots).
    assert out == [A.Migrate(trajs[0][0], 2, False), A.LoadVersion(0, 1, "drain", -1),
                   A.Migrate(trajs[1][0], 3, False), A.Migrate(trajs[1][1], 3, False),
                   A.LoadVersion(1, 1, "drain", -1)]


def test_batch_bound_keeps_a_source_in_place():
    pol, trajs = _policy(repack_batch=7)
    out = pol.handle(E.KVRead((0, 1, 2, 3), KV), 1.0)
    # source 1 fits nowhere: 3 would end with 8 > 7 sequences, 2 with 1400 KV
    assert out == [A.Migrate(trajs[0][0], 2, False), A.LoadVersion(0, 1, "drain", -1)]


def test_kv_fill_bound_and_a_destination_is_no_longer_a_source():
    pol, trajs = _policy(repack_kv_fill=0.85)
    out = pol.handle(E.KVRead((0, 1, 2, 3), KV), 1.0)
    # source 0: 2 would end at 900 > 850, so 1 (800) is the fullest that fits; source 1 then
    # holds a trajectory in transit and stays.
    assert out == [A.Migrate(trajs[0][0], 1, False), A.LoadVersion(0, 1, "drain", -1)]


def test_repack_reads_kv_last_and_at_most_once_per_interval():
    pol, _ = _policy(repack_interval_s=5.0)
    pol.now = 10.0
    pol._out = []
    pol.repack()
    assert pol._kv_wanted == {0, 1, 2, 3}  # the busy instances of the sources' version
    pol._kv_wanted = set()
    out = pol.handle(E.VersionPublished(1), 10.0)  # publication forces a check
    assert out[-1] == A.ReadKV((0, 1, 2, 3)) and sum(isinstance(a, A.ReadKV) for a in out) == 1
    pol.now = 12.0
    pol.repack()
    assert not pol._kv_wanted  # 2 s after the last check


def test_no_read_without_a_source():
    pol, _ = _policy(repack_occupancy=0.1)  # 0.8 of a slot: no instance is under-occupied
    pol.now = 100.0
    pol.repack()
    assert not pol._kv_wanted
