"""Faults in the simulator: hand-computed failure, restart, retry and straggler cases; the fast
engine against the reference with faults; guarantees under drawn failures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dora.sched.registry import names
from dora.errors import InputError
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_config, write_lengths
from tests.sim.test_arithmetic import A, B_SEQ, C_CTX, COST, LOAD, P_TOK, PUBLISH, T0, T1

POLICIES = list(names())  # every registered policy
# the two-trajectory case of test_arithmetic: responses 3 and 5, prompts of 10, one instance
T_STEP = [P_TOK * 20 + A + 2 * B_SEQ + C_CTX * 20]  # decode step ends, both running
for _j in range(1, 3):
    T_STEP.append(T_STEP[-1] + A + 2 * B_SEQ + C_CTX * (20 + 2 * _j))
ROLLOUT = T_STEP[2] + 2 * A + 2 * B_SEQ + C_CTX * (13 + 14)
TRAIN = T0 + T1 * 28


def _two(tmp_path, **over):
    trace = write_lengths(tmp_path / "two.parquet", [[3, 5]], prompt_len=10)
    base = {"steps": 2, "cluster.instances": 1, "cluster.trainer_devices": 1, "cluster.max_seqs": 4,
            "cluster.kv_tokens": 1000, "policy.batch_size": 1, "policy.eta": 1, "policy.sync.colocated": False,
            "cost": COST}
    base.update(over)
    return load_trace(trace), small_config(trace, **base)


def _t(df, event):
    return df[df["event"] == event]["t_s"].to_numpy()


def test_failure_loses_work_and_the_group_is_regenerated(tmp_path):
    """Failure between decode steps 2 and 3: both trajectories lose their 2 tokens; the
    instance is back R later with version 0 and the group starts over from scratch."""
    tf, R = (T_STEP[1] + T_STEP[2]) / 2, 7.0
    trace, cfg = _two(tmp_path, **{"faults.fail_at": [[tf, 0]], "faults.repair_s": R})
    r = simulate(trace, cfg, "sync", progress=False)
    ev = r.events
    lost = ev[ev["event"] == "lost"]
    assert lost["tokens"].tolist() == [2, 2]
    assert lost["t_s"].tolist() == pytest.approx([tf, tf], rel=1e-12)
    assert _t(ev, "fail") == pytest.approx([tf]) and _t(ev, "recover") == pytest.approx([tf + R])
    assert (ev["event"] == "regenerate").sum() == 1
    assert _t(ev, "publish")[0] == pytest.approx(tf + R + ROLLOUT + TRAIN + PUBLISH, rel=1e-12)
    m = r.metrics
    assert m["instance_failures"] == 1
    assert m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
    assert m["waste_ratio"] == pytest.approx(4 / (4 + 8 + 8), rel=1e-12)  # 4 lost tokens of 20 generated


def test_trainer_restart_redoes_the_step(tmp_path):
    """A crash halfway through the step: the step is redone in full after the restart."""
    tc, RS = ROLLOUT + TRAIN / 2, 3.0
    trace, cfg = _two(tmp_path, **{"faults.trainer_restart_at": [tc], "faults.trainer_restart_s": RS})
    r = simulate(trace, cfg, "sync", progress=False)
    assert _t(r.events, "publish")[0] == pytest.approx(tc + RS + TRAIN + PUBLISH, rel=1e-12)
    assert (r.events["event"] == "train").sum() == 4  # each trajectory consumed once per step
    assert (r.events["event"] == "trainer_restart").sum() == 1


def test_failed_weight_loads_are_retried(tmp_path):
    """Every failed load costs one more load time before the instance serves again."""
    trace, cfg = _two(tmp_path, **{"steps": 3, "faults.load_fail_prob": 0.6, "seed": 3})
    base_trace, base_cfg = _two(tmp_path, steps=3)
    r = simulate(trace, cfg, "sync", progress=False)
    b = simulate(base_trace, base_cfg, "sync", progress=False)
    ev = r.events
    pub, fails = _t(ev, "publish"), _t(ev, "load_fail")
    assert len(fails) >= 1
    gaps, base_gaps = pub[1:] - pub[:-1], _t(b.events, "publish")[1:] - _t(b.events, "publish")[:-1]
    per_gap = [((fails > pub[k]) & (fails <= pub[k + 1])).sum() for k in range(len(gaps))]
    assert gaps == pytest.approx(base_gaps + LOAD * np.array(per_gap), rel=1e-12)


def test_stragglers_run_slower(tmp_path):
    trace, cfg = _two(tmp_path, **{"faults.straggler_fraction": 1.0, "faults.straggler_slowdown": 2.0})
    r = simulate(trace, cfg, "sync", progress=False)
    assert _t(r.events, "finish")[1] == pytest.approx(2 * ROLLOUT, rel=1e-12)


@pytest.mark.parametrize("policy", POLICIES)
def test_fast_engine_matches_reference_with_faults(small_trace, policy):
    over = {"steps": 3, "cluster.instances": 4, "policy.batch_size": 4, "policy.eta": 1,
            "faults.fail_at": [[3.0, 1], [6.25, 2], [14.5, 1]], "faults.repair_s": 5.0,
            "faults.load_fail_prob": 0.3, "faults.trainer_restart_at": [12.0], "faults.trainer_restart_s": 2.0,
            "faults.straggler_fraction": 0.25, "faults.straggler_slowdown": 1.5}
    fast = simulate(load_trace(small_trace), small_config(small_trace, **over), policy, progress=False)
    ref = simulate(load_trace(small_trace), small_config(small_trace, reference=True, **over), policy,
                   progress=False)
    assert fast.metrics["instance_failures"] >= 2
    for k, v in fast.metrics.items():
        if k in ("sim_wall_s", "events", "scheduler_events"):
            continue
        assert ref.metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


@pytest.mark.parametrize("policy", POLICIES)
def test_guarantees_hold_under_drawn_failures(small_trace, policy):
    """An MTBF that fails instances many times over: C2 and C3 hold, C1 except partial."""
    cfg = small_config(small_trace, **{"steps": 5, "faults.mtbf_s": 25.0, "faults.repair_s": 8.0,
                                       "faults.load_fail_prob": 0.1})
    m = simulate(load_trace(small_trace), cfg, policy, progress=False).metrics
    assert m["instance_failures"] >= 4
    assert m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
    if policy != "partial":
        assert m["c1_violations"] == 0
    assert m["steps"] == 5


def test_every_instance_down_at_once(small_trace):
    """With the whole cluster down, policies wait for a recovery instead of failing."""
    fails = [[5.0, i] for i in range(8)]
    for policy in POLICIES:
        cfg = small_config(small_trace, **{"steps": 2, "faults.fail_at": fails, "faults.repair_s": 10.0})
        m = simulate(load_trace(small_trace), cfg, policy, progress=False).metrics
        assert m["instance_failures"] == 8 and m["steps"] == 2 and m["c2_lost"] == 0, policy


@pytest.mark.parametrize("over, word", [
    ({"faults.fail_at": [[1.0, 99]]}, "instance 99"),
    ({"faults.mtbf_s": -1.0}, "mtbf_s"),
    ({"faults.fail_at": [[1.0]]}, "fail_at[0]"),
    ({"faults.straggler_slowdown": 0.5}, "straggler_slowdown"),
    ({"faults.load_fail_prob": 1.0}, "load_fail_prob"),
])
def test_bad_fault_settings_are_refused(small_trace, over, word):
    with pytest.raises(InputError, match=word.replace("[", r"\[").replace("]", r"\]")):
        cfg = small_config(small_trace, **over)
        simulate(load_trace(small_trace), cfg, "dora", progress=False)


@pytest.mark.parametrize("policy", POLICIES)
def test_no_deadlock_with_many_regenerations(policy):
    """128 instances failing every ~3000 s over 20 steps of moe_longtail: many groups are
    regenerated, and each policy must still pick a batch that keeps η (partial once took the
    earliest-sampled groups, newer regenerated ones included, and waited for ever)."""
    from dora.config import build
    from dora.sim.config import SimConfig

    cfg = build(SimConfig, {"steps": 20, "cluster": {"instances": 128, "trainer_devices": 128},
                            "policy": {"batch_size": 64}, "faults": {"mtbf_s": 3000.0, "repair_s": 600.0}})
    m = simulate(load_trace(str(Path(__file__).resolve().parents[2] / "traces" / "moe_longtail.parquet")), cfg, policy, progress=False).metrics
    assert m["steps"] == 20 and m["instance_failures"] > 20
    assert m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0


def test_a_stall_under_perpetual_failures_is_reported(small_trace, monkeypatch):
    """Failures recur for ever; a policy that stops scheduling must still end in a stall error."""
    from dora.sched.registry import POLICIES
    from dora.sched.policies.dora import DoraPolicy

    class NeverTrains(DoraPolicy):  # a policy that never trains (compiled policies take subclasses)
        def ready_batch(self):
            return None

    monkeypatch.setitem(POLICIES, "dora", NeverTrains)
    cfg = small_config(small_trace, **{"steps": 2, "faults.mtbf_s": 50.0, "faults.repair_s": 5.0})
    with pytest.raises(RuntimeError, match="stalled"):
        simulate(load_trace(small_trace), cfg, "dora", progress=False)


@pytest.mark.parametrize("policy", POLICIES)
def test_guarantees_hold_with_request_latency(small_trace, policy):
    """Results that reach the policy late (request_latency_s) while instances fail, versions load and
    the policy aborts or migrates: still nothing lost or duplicated, fast engine = reference."""
    over = {"steps": 5, "faults.mtbf_s": 25.0, "faults.repair_s": 8.0, "cost.request_latency_s": 0.4}
    fast = simulate(load_trace(small_trace), small_config(small_trace, **over), policy, progress=False)
    m = fast.metrics
    assert m["instance_failures"] >= 4 and m["steps"] == 5
    assert m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
    if policy != "partial":
        assert m["c1_violations"] == 0
    ref = simulate(load_trace(small_trace), small_config(small_trace, reference=True, **over), policy,
                   progress=False)
    for k, v in m.items():
        if k not in ("sim_wall_s", "events", "scheduler_events"):
            assert ref.metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_a_result_in_flight_dies_with_its_instance(tmp_path):
    """Both trajectories finish (at T_STEP[2] and ROLLOUT) but their results take 1 s to arrive; the
    instance fails 0.5 s after the first finish: both results are lost on arrival, not finished, and
    the group is regenerated."""
    tr, cfg = _two(tmp_path, **{"cost": {**COST, "request_latency_s": 1.0}, "faults.fail_at": [[T_STEP[2] + 0.5, 0]],
                                "faults.repair_s": 1.0})
    r = simulate(tr, cfg, "sync", progress=False)
    ev = r.events
    lost = ev[ev["event"] == "lost"].sort_values("t_s")
    assert lost["tokens"].tolist() == [3, 5]
    assert lost["t_s"].to_numpy() == pytest.approx([T_STEP[2] + 1.0, ROLLOUT + 1.0])
    assert r.metrics["c2_lost"] == r.metrics["c2_duplicated"] == 0 and r.metrics["steps"] == 2
