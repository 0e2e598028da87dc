"""Hand-computed cases that pin the simulator's arithmetic."""

from __future__ import annotations

import math

import numpy as np

import pytest

from dora.sim.cost import CostModel
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_config, write_lengths

# a linear cost model with round numbers (seconds)
A, B_SEQ, C_CTX, P_TOK = 0.01, 0.001, 1e-5, 1e-4
LOAD, PUBLISH, T0, T1 = 2.0, 0.5, 1.0, 0.01
COST = {"decode_base_s": A, "decode_expert_s": 0.0, "decode_per_seq_s": B_SEQ, "decode_per_ctx_token_s": C_CTX,
        "prefill_per_token_s": P_TOK, "weight_load_s": LOAD, "publish_s": PUBLISH, "train_base_s": T0,
        "train_device_s_per_token": T1, "moe_imbalance_cv": 0.0}


def test_sync_step_on_two_trajectories(tmp_path):
    """One group of two samples (responses 3 and 5 tokens, prompts of 10) on one instance.

    Both are admitted at t=0: prefill 2x10 tokens, first tokens come out of that step.
    Steps 1-3 run 2 sequences, contexts 10+j each:   3a + 3*2b + c*(2*10 + 2*11 + 2*12)
    plus the prefill                                  p*20
    Steps 4-5 run the 5-token one, contexts 13, 14:   2a + 2b + c*(13 + 14)
    Train 2 trajectories of 10+3 and 10+5 tokens on 1 device: T0 + T1*28; publish; then
    every instance loads the new version (LOAD) before the next batch starts.
    """
    trace = write_lengths(tmp_path / "two.parquet", [[3, 5]], prompt_len=10)
    cfg = small_config(trace, **{"steps": 2, "cluster.instances": 1, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 4, "cluster.kv_tokens": 1000, "policy.batch_size": 1,
                                 "policy.eta": 1, "policy.sync.colocated": False, "cost": COST})
    rollout = (P_TOK * 20 + 3 * A + 6 * B_SEQ + C_CTX * (20 + 22 + 24)
               + 2 * A + 2 * B_SEQ + C_CTX * (13 + 14))
    train = T0 + T1 * 28
    step = rollout + train + PUBLISH + LOAD  # publication to publication
    r = simulate(load_trace(trace), cfg, "sync", progress=False)
    m = r.metrics
    assert m["step_time_mean_s"] == pytest.approx(step, rel=1e-12)
    assert m["sim_time_s"] == pytest.approx(rollout + train + PUBLISH + step, rel=1e-12)
    assert m["e2e_samples_per_s"] == pytest.approx(2 / step, rel=1e-12)
    assert m["trained_samples"] == 4 and m["steps"] == 2
    # the first segment of each trajectory ends at its finish time
    fin = r.events[r.events["event"] == "finish"].sort_values("t_s")
    t3 = P_TOK * 20 + 3 * A + 6 * B_SEQ + C_CTX * 66
    assert fin["t_s"].iloc[0] == pytest.approx(t3, rel=1e-12)
    assert fin["t_s"].iloc[1] == pytest.approx(rollout, rel=1e-12)
    assert fin["tokens"].tolist()[:2] == [3, 5]


def test_request_latency_delays_each_result(tmp_path):
    """The same sync step with request_latency_s = L: each result reaches the policy L after its last
    token (the finish rows move by L), so the trainer starts L later and the step takes L longer."""
    L = 0.05
    trace = write_lengths(tmp_path / "two.parquet", [[3, 5]], prompt_len=10)
    cfg = small_config(trace, **{"steps": 2, "cluster.instances": 1, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 4, "cluster.kv_tokens": 1000, "policy.batch_size": 1,
                                 "policy.eta": 1, "policy.sync.colocated": False,
                                 "cost": {**COST, "request_latency_s": L}})
    rollout = (P_TOK * 20 + 3 * A + 6 * B_SEQ + C_CTX * (20 + 22 + 24)
               + 2 * A + 2 * B_SEQ + C_CTX * (13 + 14))
    step = rollout + L + T0 + T1 * 28 + PUBLISH + LOAD
    r = simulate(load_trace(trace), cfg, "sync", progress=False)
    assert r.metrics["step_time_mean_s"] == pytest.approx(step, rel=1e-12)
    fin = r.events[r.events["event"] == "finish"].sort_values("t_s")
    t3 = P_TOK * 20 + 3 * A + 6 * B_SEQ + C_CTX * 66
    assert fin["t_s"].iloc[0] == pytest.approx(t3 + L, rel=1e-12)
    assert fin["t_s"].iloc[1] == pytest.approx(rollout + L, rel=1e-12)


def test_closed_form_equals_single_steps():
    """T(j) of a run equals j single steps summed with their growing contexts."""
    cost = CostModel(**{k: v for k, v in COST.items()})
    n, ctx0, k = 7, 1234, 50
    summed = sum(cost.step_s([n], n * ctx0 + n * j) for j in range(k))
    closed = k * (A + B_SEQ * n + C_CTX * n * ctx0) + C_CTX * n * k * (k - 1) / 2
    assert math.isclose(summed, closed, rel_tol=1e-12)


def test_moe_expert_share():
    """A lone sequence reads top_k/E of the experts, a full batch nearly all of them."""
    c = CostModel(decode_base_s=1.0, decode_expert_s=10.0, expert_touch=0.0625)
    assert c.weights_s(1) == pytest.approx(1.0 + 10.0 * 0.0625)
    assert c.weights_s(64) == pytest.approx(1.0 + 10.0 * (1 - 0.9375 ** 64))
    assert c.weights_s(0) == 1.0


@pytest.mark.parametrize("policy", ["sync", "one_step", "partial", "laminar", "dora"])
def test_fast_engine_matches_reference(small_trace, policy):
    """Analytic jumps over decode runs give the same run as one event per decode step."""
    over = {"steps": 3, "cluster.instances": 4, "policy.batch_size": 4, "policy.eta": 1}
    fast = simulate(load_trace(small_trace), small_config(small_trace, **over), policy, progress=False)
    ref = simulate(load_trace(small_trace), small_config(small_trace, reference=True, **over), policy,
                   progress=False)
    assert ref.metrics["events"] > 2 * fast.metrics["events"]  # the reference really steps
    for k, v in fast.metrics.items():
        if k in ("sim_wall_s", "events", "scheduler_events"):
            continue
        assert ref.metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    pub_f = fast.events[fast.events["event"] == "publish"]["t_s"].to_numpy()
    pub_r = ref.events[ref.events["event"] == "publish"]["t_s"].to_numpy()
    assert pub_f == pytest.approx(pub_r, rel=1e-9)


def test_shared_host_slows_the_trainer_and_busy_engines(tmp_path):
    """host_cores = 0.5: the sync step of the two-trajectory case trains alone (no engine holds work),
    so its trainer step takes (0 + 1) / 0.5 = 2 times as long; nothing else changes."""
    trace = write_lengths(tmp_path / "two.parquet", [[3, 5]], prompt_len=10)
    cfg = small_config(trace, **{"steps": 2, "cluster.instances": 1, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 4, "cluster.kv_tokens": 1000, "policy.batch_size": 1,
                                 "policy.eta": 1, "policy.sync.colocated": False,
                                 "cost": {**COST, "host_cores": 0.5}})
    rollout = (P_TOK * 20 + 3 * A + 6 * B_SEQ + C_CTX * (20 + 22 + 24)
               + 2 * A + 2 * B_SEQ + C_CTX * (13 + 14))
    step = rollout + 2 * (T0 + T1 * 28) + PUBLISH + LOAD
    r = simulate(load_trace(trace), cfg, "sync", progress=False)
    assert r.metrics["step_time_mean_s"] == pytest.approx(step, rel=1e-12)


def test_shared_host_factor_counts_the_engines_holding_work(small_trace):
    """one_step trains while the engines generate: with host_cores = 1 every trainer step takes
    (k + 1) times its own cost, k the engines holding trajectories when it starts; plenty of
    cores change nothing."""
    over = {"steps": 4, "cluster.instances": 4, "cluster.trainer_devices": 1, "policy.batch_size": 4}
    base = simulate(load_trace(small_trace), small_config(small_trace, **over), "one_step", progress=False)
    many = simulate(load_trace(small_trace), small_config(small_trace, **over, **{"cost.host_cores": 64.0}),
                    "one_step", progress=False)
    one = simulate(load_trace(small_trace), small_config(small_trace, **over, **{"cost.host_cores": 1.0}),
                   "one_step", progress=False)
    for k in ("e2e_samples_per_s", "step_time_mean_s", "bubble_ratio"):
        assert many.metrics[k] == base.metrics[k], k
    own = CostModel(**{k: v for k, v in one.config["cost"].items() if k != "host_cores"})
    ev = one.events
    ends = ev[ev["event"] == "train_end"]
    ratios = ends["dur_s"].to_numpy() / np.array([own.train_s(int(t), 1) for t in ends["tokens"]])
    assert np.allclose(ratios, np.round(ratios)) and ratios.min() >= 1 and ratios.max() > 1
    assert one.metrics["e2e_samples_per_s"] < base.metrics["e2e_samples_per_s"]


@pytest.mark.parametrize("reference", [False, True])
def test_kv_reading_mid_run(tmp_path, monkeypatch, reference):
    """KVRead between boundaries: prompt + the steps done by then, for each running sequence.

    Two instances with one slot each run the samples of one group (responses 3 and 50, prompts
    of 10). The 3-token result reaches the policy L = 0.025 s after its last token, which asks
    for a reading then. Instance 0 holds nothing; instance 1 has done the steps that end by
    T(3) + L, where a step of one sequence at context 10+j takes a + b + c*(10+j) after a
    prefill of p*10: steps 4 and 5 end by then, step 6 does not, so it holds 10 + 5 tokens."""
    from dora.sched.policies import POLICIES

    L = 0.025
    step = [A + B_SEQ + C_CTX * (10 + j) for j in range(60)]
    t3 = P_TOK * 10 + sum(step[:3])
    assert t3 + sum(step[3:5]) < t3 + L < t3 + sum(step[3:6])
    readings: list[tuple[float, tuple]] = []

    class Reading(POLICIES["sync"]):
        def on_finished(self, traj, inst, group_done):
            super().on_finished(traj, inst, group_done)
            self.read_kv([0, 1])

        def on_kv(self, used):
            readings.append((self.now, tuple(used.values())))

    monkeypatch.setitem(POLICIES, "sync", Reading)
    trace = write_lengths(tmp_path / "two.parquet", [[3, 50]], prompt_len=10)
    cfg = small_config(trace, **{"steps": 2, "cluster.instances": 2, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 1, "cluster.kv_tokens": 1000, "policy.batch_size": 1,
                                 "policy.eta": 1, "policy.sync.colocated": False, "reference": reference,
                                 "cost": {**COST, "request_latency_s": L}})
    simulate(load_trace(trace), cfg, "sync", progress=False)
    now, used = readings[0]
    assert now == pytest.approx(t3 + L, rel=1e-12)
    assert used == (0, 15)
