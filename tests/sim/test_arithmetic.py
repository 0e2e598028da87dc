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
    from dora.sched.registry import POLICIES

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


# ---- multi-turn trajectories: tool calls between turns ------------------------------------------

def _one_instance(trace, **over):
    base = {"steps": 2, "cluster.instances": 1, "cluster.trainer_devices": 1, "cluster.max_seqs": 4,
            "cluster.kv_tokens": 1000, "policy.batch_size": 1, "policy.eta": 1, "policy.sync.colocated": False,
            "cost": COST}
    return small_config(trace, **{**base, **over})


def _rows(ev, name, traj=None):
    r = ev[ev["event"] == name]
    return r if traj is None else r[r["trajectory"] == traj]


def test_two_turn_trajectory_alone(tmp_path):
    """One trajectory of 6 tokens in 2 turns (prompt 10), a tool call of W = 5 s appending 4 tokens.

    Turn 1 makes 6 // 2 = 3 tokens: prefill p*10, steps at contexts 10, 11, 12. The tool call
    then takes W with the sequence out of the batch; its output (4 tokens) is prefilled when it
    rejoins, and turn 2 makes the other 3 tokens at contexts 17, 18, 19. The trainer trains on
    prompt + response + tool output = 20 tokens. The decode-slot share covers the six steps
    only (none of the wait); the useful prefill is the prompt's and the tool output's."""
    W = 5.0
    trace = write_lengths(tmp_path / "turns.parquet", [[6]], prompt_len=10, turns=[[2]], tool_wait_s=W,
                          tool_tokens=4)
    turn1 = 3 * A + 3 * B_SEQ + C_CTX * (10 + 11 + 12)
    turn2 = 3 * A + 3 * B_SEQ + C_CTX * (17 + 18 + 19)
    t1 = P_TOK * 10 + turn1
    rollout = t1 + W + P_TOK * 4 + turn2
    step = rollout + T0 + T1 * 20 + PUBLISH + LOAD
    r = simulate(load_trace(trace), _one_instance(trace), "sync", progress=False)
    ev = r.events
    assert r.metrics["step_time_mean_s"] == pytest.approx(step, rel=1e-12)
    fin = _rows(ev, "finish").sort_values("t_s")
    assert fin["t_s"].iloc[0] == pytest.approx(rollout, rel=1e-12)
    assert fin["tokens"].iloc[0] == 6
    assert fin["busy_s"].iloc[0] == pytest.approx((turn1 + turn2) / 4, rel=1e-12)  # 4 slots, 1 device
    assert fin["prefill_s"].iloc[0] == pytest.approx(P_TOK * 14, rel=1e-12)
    start, end = _rows(ev, "tool_start", 0), _rows(ev, "tool_end", 0)
    assert start["t_s"].tolist() == pytest.approx([t1], rel=1e-12) and start["tokens"].tolist() == [13]
    assert end["t_s"].tolist() == pytest.approx([t1 + W], rel=1e-12) and end["tokens"].tolist() == [4]
    assert _rows(ev, "train_end")["tokens"].tolist() == [20, 20]
    assert r.metrics["reprefill_tokens"] == 0 and r.metrics["waste_ratio"] == 0


@pytest.mark.parametrize("W", [0.01, 1.0])
def test_tool_wait_frees_the_slot(tmp_path, W):
    """One slot, two groups of one trajectory (prompts 10): A makes 4 tokens in 2 turns with a
    tool call of W (2 tokens of output), B 3 tokens in one turn. A runs first; its tool call
    frees the slot, so B runs at once (prefill p*10, contexts 10, 11, 12). W = 0.01: A is back
    while B runs and waits for the slot (FCFS) until B ends; W = 1: B is done, A runs when back.
    A's second turn: prefill p*2, contexts 14, 15 (its 12 tokens of KV stayed pinned)."""
    trace = write_lengths(tmp_path / "slot.parquet", [[4], [3]], prompt_len=10, turns=[[2], [1]], tool_wait_s=W,
                          tool_tokens=2)
    tA1 = P_TOK * 10 + 2 * A + 2 * B_SEQ + C_CTX * (10 + 11)
    tB = tA1 + P_TOK * 10 + 3 * A + 3 * B_SEQ + C_CTX * (10 + 11 + 12)
    back = max(tA1 + W, tB)
    tA2 = back + P_TOK * 2 + 2 * A + 2 * B_SEQ + C_CTX * (14 + 15)
    r = simulate(load_trace(trace), _one_instance(trace, **{"cluster.max_seqs": 1, "policy.batch_size": 2}), "sync",
                 progress=False)
    ev = r.events
    fin = _rows(ev, "finish")
    fin = fin[fin["t_s"] < tA2 + 1e-9]
    assert dict(zip(fin["trajectory"], fin["t_s"])) == {0: pytest.approx(tA2, rel=1e-12),
                                                        1: pytest.approx(tB, rel=1e-12)}
    busy = dict(zip(fin["trajectory"], fin["busy_s"]))  # one slot: the decode share is the step time
    assert busy[0] == pytest.approx(4 * A + 4 * B_SEQ + C_CTX * (10 + 11 + 14 + 15), rel=1e-12)
    assert busy[1] == pytest.approx(3 * A + 3 * B_SEQ + C_CTX * 33, rel=1e-12)
    assert _rows(ev, "tool_end", 0)["t_s"].iloc[0] == pytest.approx(tA1 + W, rel=1e-12)


def _scripted(monkeypatch, act):
    """`sync` whose on_finished of trajectory 1 (the first time) calls act(policy, inst 1); it
    reads every instance's KV then and on each migration's arrival (into `readings`)."""
    from dora.sched.registry import POLICIES

    readings: list[tuple[str, float, tuple]] = []

    class Scripted(POLICIES["sync"]):
        done = False

        def on_finished(self, traj, inst, group_done):
            super().on_finished(traj, inst, group_done)
            if traj == 1 and not Scripted.done:
                Scripted.done = True
                act(self, self.view.instances[1])
                self.read_kv([0, 1])
                self._why = "finish"

        def on_migrated(self, traj, src, dst):
            self.read_kv([0, 1])
            self._why = "migrated"

        def on_kv(self, used):
            readings.append((self._why, self.now, tuple(used.values())))

    monkeypatch.setitem(POLICIES, "sync", Scripted)
    return readings


def _pair_trace(tmp_path, W):
    """A (instance 0): 6 tokens in 2 turns, tool call of W appending 4; B (instance 1): 5 tokens."""
    trace = write_lengths(tmp_path / "pair.parquet", [[6, 5]], prompt_len=10, turns=[[2, 1]], tool_wait_s=W,
                          tool_tokens=4)
    tA1 = P_TOK * 10 + 3 * A + 3 * B_SEQ + C_CTX * (10 + 11 + 12)
    tB = P_TOK * 10 + 5 * A + 5 * B_SEQ + C_CTX * (10 + 11 + 12 + 13 + 14)
    assert tA1 < tB < tA1 + W
    return trace, tA1, tB


def test_migrate_during_tool_call(tmp_path, monkeypatch):
    """A is in its tool call when B finishes; the policy moves A with its KV (13 tokens) to
    instance 1: it arrives kv_transfer_s(13) later, waits there for the call to end (its KV
    pinned there, none left on instance 0), then prefills the 4 tool tokens and makes its
    second turn on instance 1."""
    W = 1.0
    trace, tA1, tB = _pair_trace(tmp_path, W)
    readings = _scripted(monkeypatch, lambda pol, dst: pol.migrate(0, dst, kv=True))
    cfg = _one_instance(trace, **{"cluster.instances": 2})
    r = simulate(load_trace(trace), cfg, "sync", progress=False)
    ev = r.events
    cost = CostModel(**COST)
    arrive = tB + cost.kv_transfer_s(13)
    assert readings[:2] == [("finish", pytest.approx(tB), (0, 0)), ("migrated", pytest.approx(arrive), (0, 13))]
    out, into = _rows(ev, "migrate_out", 0), _rows(ev, "migrate_in", 0)
    assert out["instance"].tolist() == [0] and out["tokens"].tolist() == [3]
    assert into["instance"].tolist() == [1] and into["tokens"].tolist() == [13]
    end = _rows(ev, "tool_end", 0)
    assert end["instance"].tolist() == [1] and end["t_s"].tolist() == pytest.approx([tA1 + W], rel=1e-12)
    fin = _rows(ev, "finish", 0)
    t_fin = tA1 + W + P_TOK * 4 + 3 * A + 3 * B_SEQ + C_CTX * (17 + 18 + 19)
    assert fin["instance"].tolist() == [1] and fin["t_s"].tolist() == pytest.approx([t_fin], rel=1e-12)
    assert fin["tokens"].tolist() == [3]  # this segment's; 3 + 3 over the trajectory
    assert r.metrics["migrations"] == 1 and r.metrics["c2_lost"] == 0 and r.metrics["trained_samples"] == 4


def test_abort_during_tool_call(tmp_path, monkeypatch):
    """Aborted in its tool call, A is dropped at once: its pinned KV is freed and its call's
    return is ignored; its group is generated again."""
    W = 1.0
    trace, tA1, tB = _pair_trace(tmp_path, W)

    def act(pol, dst):
        g = pol.view.groups[pol.view.trajs[0].prompt_id]
        pol.regenerate(g, "test")

    readings = _scripted(monkeypatch, act)
    r = simulate(load_trace(trace), _one_instance(trace, **{"cluster.instances": 2}), "sync", progress=False)
    ev = r.events
    assert readings[0] == ("finish", pytest.approx(tB), (0, 0))
    ab = _rows(ev, "abort", 0)
    assert ab["t_s"].tolist() == pytest.approx([tB]) and ab["tokens"].tolist() == [3]
    assert len(_rows(ev, "tool_start", 0)) == 1 and len(_rows(ev, "tool_end", 0)) == 0
    assert r.metrics["c2_lost"] == 0 and r.metrics["c2_duplicated"] == 0 and r.metrics["steps"] == 2


def test_instance_failure_during_tool_call(tmp_path):
    """Instance 0 fails while A is in its tool call: A is lost with the 3 tokens of its first
    turn, its call's return is ignored, and its group is generated again."""
    W = 1.0
    trace, tA1, tB = _pair_trace(tmp_path, W)
    t_fail = tA1 + W / 2
    cfg = _one_instance(trace, **{"cluster.instances": 2, "faults.fail_at": [[t_fail, 0]], "faults.repair_s": 1.0})
    r = simulate(load_trace(trace), cfg, "sync", progress=False)
    ev = r.events
    lost = _rows(ev, "lost", 0)
    assert lost["t_s"].tolist() == pytest.approx([t_fail]) and lost["tokens"].tolist() == [3]
    assert len(_rows(ev, "tool_end", 0)) == 0
    assert r.metrics["c2_lost"] == 0 and r.metrics["steps"] == 2


def test_pinned_context_gives_way_to_a_running_sequence(tmp_path):
    """KV of 35 tokens, two slots: A (4 tokens in 2 turns, tool output 2) and B (20 tokens) start
    together (prefill p*20). After A's first turn (2 steps at 2 x contexts 10+j) it pins 12
    tokens; B grows until B's context + its next token + 12 would pass 35, and A's pinned context
    is dropped (a `preempt` row of 12 tokens) rather than B preempted. Back after W, A
    prefills 12 + 2 tokens (only the 2 are new: its useful prefill is p*(10 + 2)) and makes its
    last 2 tokens at contexts 14, 15."""
    W = 1.0
    trace = write_lengths(tmp_path / "kv.parquet", [[4, 20]], prompt_len=10, turns=[[2, 1]], tool_wait_s=W,
                          tool_tokens=2)
    r = simulate(load_trace(trace), _one_instance(trace, **{"cluster.max_seqs": 2, "cluster.kv_tokens": 35}),
                 "sync", progress=False)
    ev = r.events
    tA1 = P_TOK * 20 + 2 * A + 4 * B_SEQ + C_CTX * (20 + 22)
    pre = _rows(ev, "preempt")
    first = pre[pre["t_s"] < tA1 + W]
    assert first["trajectory"].tolist() == [0] and first["tokens"].tolist() == [12]
    assert first["detail"].tolist() == ["pinned context"]
    fin = _rows(ev, "finish", 0)
    t_fin = tA1 + W + P_TOK * 14 + 2 * A + 2 * B_SEQ + C_CTX * (14 + 15)
    assert fin["t_s"].iloc[0] == pytest.approx(t_fin, rel=1e-12)
    assert fin["prefill_s"].iloc[0] == pytest.approx(P_TOK * 12, rel=1e-12)
    assert r.metrics["reprefill_tokens"] == 2 * 12  # both steps alike


def test_one_turn_columns_change_nothing(small_trace, tmp_path):
    """A trace whose every trajectory has one turn runs exactly as the same trace without the
    multi-turn columns (same event log)."""
    from dora.trace import write_trace

    tr = load_trace(small_trace)
    cols = {"prompt_id": tr.prompt_id, "sample_idx": tr.sample_idx, "prompt_len": tr.prompt_len,
            "response_len": tr.response_len, "step": tr.step, "finish_reason": tr.finish_reason,
            "turns": np.ones(len(tr), np.int32), "tool_wait_s": np.full(len(tr), 3.0),
            "tool_tokens": np.full(len(tr), 50, np.int32)}
    one = tmp_path / "one_turn.parquet"
    write_trace(one, cols, tr.metadata)
    over = {"steps": 3, "cluster.instances": 4, "policy.batch_size": 4}
    for policy in ("dora", "partial"):
        a = simulate(load_trace(small_trace), small_config(small_trace, **over), policy, progress=False)
        b = simulate(load_trace(one), small_config(one, **over), policy, progress=False)
        assert a.events.drop(columns="detail").equals(b.events.drop(columns="detail"))
        assert {k: v for k, v in a.metrics.items() if k != "sim_wall_s"} == \
            {k: v for k, v in b.metrics.items() if k != "sim_wall_s"}
