"""dora's tail hosting, hand-computed: an old-version instance with few trajectories of its own
takes the tail of its version predicted to finish last when the later of that tail and its own
trajectories, slowed by it, is at least 5% sooner than the tail where it runs."""

from __future__ import annotations

import pytest

from dora.config import build
from dora.sched import events as E
from dora.sched.config import PolicyConfig
from dora.sched.costs import DecodeCost
from dora.sched.policies.dora import DoraPolicy

# a decode step of n sequences: 0.005 + 0.005·n s (no context term, free KV moves), so t tokens
# take t·(0.005 + 0.005·n) s
COST = DecodeCost(base_s=0.005, expert_s=0.0, per_seq_s=0.005, per_ctx_s=0.0, kv_base_s=0.0, kv_per_token_s=0.0,
                  weight_load_s=1.0)


def _policy(host_made: float, host_max: int = 8) -> DoraPolicy:
    """Version 0: instance 0 runs 4 trajectories (one has made 1,000 tokens, three 10), instance 1
    one that has made `host_made`; instance 2 serves the newest version (1), empty. No history
    (`predictor=none`): a trajectory's remainder is as long again as it has run, plus one."""
    cfg = build(PolicyConfig, {"batch_size": 1, "group_size": 4, "eta": 1,
                               "dora": {"predictor": "none", "host_max": host_max}})
    pol = DoraPolicy(cfg)
    pol.handle(E.ClusterStarted(tuple(E.InstanceSpec(i, 8, 10**6) for i in range(3)), 1, cost=COST), 0.0)
    v = pol.view
    v.latest_version = 1
    v.instances[0].versions = {0}
    v.instances[1].versions = {0}
    v.instances[2].versions = {1}
    for pid, inst, made in ((0, 0, (1000.0, 10.0, 10.0, 10.0)), (1, 1, (host_made,))):
        g = v.add_group(pid, len(made), 0, 0.0)
        v.open_group(g, 0)
        for k, m in enumerate(made):
            t = v.new_traj(g, k, 0, inst, 0.0)
            pol.prog.join(t.id, inst, 0, m, 0.0)
    pol.untrained = 2
    pol.index_all()
    # the cap, (1 + η + 1) x B = 3 groups, leaves one group to start: 4 samples, 8 free slots
    assert not pol.capacity_needed()
    return pol


def test_a_host_with_a_short_trajectory_takes_the_tail():
    pol = _policy(host_made=200.0)
    # the tail (1,001 tokens left) where it runs, 4 in the batch: 1,001 x 0.025 = 25.025 s; on
    # instance 1, 2 in the batch: 1,001 x 0.015 = 15.015 s, and the host's own (201 left) 3.015 s
    assert pol.prog.time_left(0, 1001.0, 0.0) == pytest.approx(25.025)
    assert pol.prog.time_left(0, 1001.0, 0.0, 1, 1) == pytest.approx(15.015)
    pol._repartition_version(0, 1)
    assert pol.view.trajs[0].instance == 1
    assert len(pol.view.instances[0].active) == 3 and len(pol.view.instances[1].active) == 2


def test_the_hosts_own_trajectories_slowed_count_in_the_gain():
    pol = _policy(host_made=1500.0)
    # the host's own (1,501 left), slowed by the tail: 1,501 x 0.015 = 22.515 s, the later of the
    # two there; 25.025 - 22.515 = 2.51 s sooner, at least 5% of 25.025 s (1.25 s): it hosts
    pol._repartition_version(0, 1)
    assert pol.view.trajs[0].instance == 1
    pol = _policy(host_made=1600.0)
    # 1,601 x 0.015 = 24.015 s: 1.01 s sooner, under 5%: the tail stays
    pol._repartition_version(0, 1)
    assert pol.view.trajs[0].instance == 0


def test_only_instances_under_host_max_host():
    pol = _policy(host_made=200.0, host_max=1)  # only a drained instance may host
    pol._repartition_version(0, 1)
    assert pol.view.trajs[0].instance == 0


def test_a_second_drained_host_weighs_the_tail_left_not_the_one_moved():
    """Two drained instances of version 0 (1 and 2) host in turn from instance 0, which runs
    trajectory 0 (1,000 tokens made) and 1-3 (10 each). Instance 1 takes trajectory 0 (25.025 s
    where it runs, 1,001 x 0.01 = 10.01 s alone). The sources' candidates are then weighed again:
    trajectory 1 (most made of the three left, lowest id) has 11 tokens left, 11 x 0.02 = 0.22 s
    on instance 0 and 11 x 0.01 = 0.11 s alone on instance 2, so instance 2 takes it; a candidate
    kept from before the move would send trajectory 0 on from instance 1 to instance 2."""
    cfg = build(PolicyConfig, {"batch_size": 1, "group_size": 4, "eta": 1, "dora": {"predictor": "none"}})
    pol = DoraPolicy(cfg)
    pol.handle(E.ClusterStarted(tuple(E.InstanceSpec(i, 8, 10**6) for i in range(4)), 1, cost=COST), 0.0)
    v = pol.view
    v.latest_version = 1
    for i in range(3):
        v.instances[i].versions = {0}
    v.instances[3].versions = {1}
    g = v.add_group(0, 4, 0, 0.0)
    v.open_group(g, 0)
    for k, made in enumerate((1000.0, 10.0, 10.0, 10.0)):
        t = v.new_traj(g, k, 0, 0, 0.0)
        pol.prog.join(t.id, 0, 0, made, 0.0)
    pol.untrained = 1
    pol.index_all()
    assert not pol.capacity_needed()
    pol._repartition_version(0, 1)
    assert [t.instance for t in v.trajs] == [1, 2, 0, 0]
