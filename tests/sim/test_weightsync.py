"""Weight publication topologies: hand-computed step times on the two-trajectory trace, and
every policy under each topology keeps C1-C3 and matches the reference engine."""

from __future__ import annotations

import math

import pytest

from dora.sched.registry import names
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_config, write_lengths
from tests.sim.test_arithmetic import COST, LOAD, PUBLISH
from tests.sim.test_faults import ROLLOUT, TRAIN

POLICIES = list(names())  # every registered policy


def _step(tmp_path, instances: int = 1, **weights) -> float:
    """Publication-to-publication time of sync (disaggregated) on `instances` copies of the group."""
    trace = write_lengths(tmp_path / "two.parquet", [[3, 5]] * instances, prompt_len=10)
    cfg = small_config(trace, **{"steps": 2, "cluster.instances": instances, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 2, "cluster.kv_tokens": 1000, "policy.batch_size": instances,
                                 "policy.eta": 1, "policy.sync.colocated": False, "cost": COST,
                                 **{f"weights.{k}": v for k, v in weights.items()}})
    ev = simulate(load_trace(trace), cfg, "sync", progress=False).events
    pub = ev[ev["event"] == "publish"]["t_s"].to_numpy()
    return float(pub[1] - pub[0])


def test_pull_is_one_load(tmp_path):
    assert _step(tmp_path) == pytest.approx(ROLLOUT + TRAIN + PUBLISH + LOAD, rel=1e-12)


def test_pull_streams_queue_the_loads(tmp_path):
    """Two instances, a store that serves one copy at a time: the second load waits for the first."""
    train2 = TRAIN + (TRAIN - COST["train_base_s"])  # two groups' tokens on one device
    assert _step(tmp_path, 2, pull_streams=1) == pytest.approx(ROLLOUT + train2 + PUBLISH + 2 * LOAD, rel=1e-12)
    assert _step(tmp_path, 2) == pytest.approx(ROLLOUT + train2 + PUBLISH + LOAD, rel=1e-12)


def test_broadcast_barrier_then_local_swap(tmp_path):
    level, swap = 0.25, 0.125
    bcast = LOAD + level * math.ceil(math.log2(1 + 1))
    got = _step(tmp_path, topology="broadcast", broadcast_level_s=level, swap_s=swap)
    assert got == pytest.approx(ROLLOUT + TRAIN + PUBLISH + bcast + swap, rel=1e-12)


def test_relay_waits_for_the_chain_then_loads_locally(tmp_path):
    local, hop = 0.375, 0.5
    got = _step(tmp_path, topology="relay", relay_local_s=local, relay_hop_s=hop)
    assert got == pytest.approx(ROLLOUT + TRAIN + PUBLISH + LOAD + local, rel=1e-12)  # relay 0: no hop


@pytest.mark.parametrize("topology", ["broadcast", "relay"])
@pytest.mark.parametrize("policy", POLICIES)
def test_policies_under_each_topology(small_trace, policy, topology):
    over = {"steps": 3, "cluster.instances": 4, "policy.batch_size": 4, "policy.eta": 1,
            "weights.topology": topology, "weights.relay_fanout": 2, "faults.fail_at": [[4.0, 3]],
            "faults.repair_s": 3.0}
    fast = simulate(load_trace(small_trace), small_config(small_trace, **over), policy, progress=False)
    ref = simulate(load_trace(small_trace), small_config(small_trace, reference=True, **over), policy,
                   progress=False)
    m = fast.metrics
    assert m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
    if policy != "partial":
        assert m["c1_violations"] == 0
    for k, v in m.items():
        if k in ("sim_wall_s", "events", "scheduler_events"):
            continue
        assert ref.metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


@pytest.mark.parametrize("policy", ["sync", "dora"])
def test_time_varying_imbalance_matches_reference(small_trace, policy):
    """Redrawn MoE slowdowns apply from step boundaries: the fast engine still equals the reference."""
    over = {"steps": 3, "cluster.instances": 4, "policy.batch_size": 4, "policy.eta": 1,
            "imbalance.redraw_s": 1.5, "imbalance.rho": 0.3, "cost.moe_imbalance_cv": 0.3}
    fast = simulate(load_trace(small_trace), small_config(small_trace, **over), policy, progress=False)
    ref = simulate(load_trace(small_trace), small_config(small_trace, reference=True, **over), policy,
                   progress=False)
    fixed = simulate(load_trace(small_trace), small_config(small_trace, **{**over, "imbalance.redraw_s": 0.0}),
                     policy, progress=False)
    assert fast.metrics["sim_time_s"] != fixed.metrics["sim_time_s"]  # the redraws change the run
    for k, v in fast.metrics.items():
        if k in ("sim_wall_s", "events", "scheduler_events"):
            continue
        assert ref.metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_imbalance_redraws_keep_the_marginal():
    """The AR(1) redraw keeps mean 1 and the CV of the lognormal factors."""
    import numpy as np

    from dora.sim.imbalance import ImbalanceConfig, ImbalanceProcess

    p = ImbalanceProcess(ImbalanceConfig(redraw_s=1.0, rho=0.7), cv=0.4, seed=0)
    f = np.exp(p.mu + p.sigma * np.random.default_rng(1).standard_normal(200_000))
    for _ in range(5):
        f = p.next(f)
    assert f.mean() == pytest.approx(1.0, abs=0.01)
    assert f.std() / f.mean() == pytest.approx(0.4, abs=0.01)
