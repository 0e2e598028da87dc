"""Multi-turn trajectories with tool calls: every policy completes an agentic trace keeping
C1-C3 (C1 except partial), with a consistent log; the fast engine matches the reference."""

from __future__ import annotations

import numpy as np
import pytest

from dora.sched.registry import POLICIES
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_config
from tests.sched.test_properties import log_problems

OVER = {"steps": 4, "cluster.instances": 4, "policy.batch_size": 4}


@pytest.fixture(scope="module")
def agentic(agentic_trace):
    return load_trace(agentic_trace)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("setting", ["plain", "tight_kv_faults"])
def test_every_policy_completes_an_agentic_trace(agentic, agentic_trace, policy, setting):
    over = dict(OVER)
    if setting == "tight_kv_faults":  # pinned contexts must give way; instances fail mid tool call
        need = int((agentic.prompt_len.astype(np.int64) + agentic.response_len + agentic.tool_tokens_total()).max())
        over.update({"cluster.kv_tokens": need + 200, "faults.mtbf_s": 60.0, "faults.repair_s": 5.0})
    r = simulate(agentic, small_config(agentic_trace, **over), policy, progress=False)
    m = r.metrics
    assert m["steps"] == 4 and m["trained_samples"] == 4 * 4 * 8
    assert m["c2_lost"] == 0 and m["c2_duplicated"] == 0 and m["c3_violations"] == 0
    if policy != "partial":
        assert m["c1_violations"] == 0
    assert log_problems(r.events) == []
    ev = r.events["event"].astype(str)
    assert (ev == "tool_start").sum() > 100 and (ev == "tool_end").sum() > 100
    if setting == "tight_kv_faults":
        assert m["instance_failures"] > 0
    # a trained trajectory's tokens: prompt + response + its tool output
    tr = r.events[ev == "train"]
    assert r.events[ev == "train_start"]["tokens"].sum() > tr["tokens"].sum()
    assert 0 < m["rollout_bubble_ratio"] < 1 and 0 <= m["waste_ratio"]


@pytest.mark.parametrize("policy", ["dora", "dora+tool_calls", "partial", "laminar"])
def test_fast_engine_matches_reference_with_tool_calls(agentic_trace, policy):
    over = {"steps": 3, "cluster.instances": 4, "policy.batch_size": 4, "policy.eta": 1}
    if policy == "dora+tool_calls":  # new groups in the slots of trajectories waiting for a tool
        policy, over["policy.dora.tool_calls"] = "dora", True
    fast = simulate(load_trace(agentic_trace), small_config(agentic_trace, **over), policy, progress=False)
    ref = simulate(load_trace(agentic_trace), small_config(agentic_trace, reference=True, **over), policy,
                   progress=False)
    assert ref.metrics["events"] > 2 * fast.metrics["events"]
    for k, v in fast.metrics.items():
        if k in ("sim_wall_s", "events", "scheduler_events"):
            continue
        assert ref.metrics[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_tool_waits_are_bubbles(agentic_trace, tmp_path):
    """The same trace with its tool calls taking no time: rollout runs faster and its decode
    slots are busier (a tool wait leaves its slot empty unless another sequence fills it)."""
    from dora.trace import write_trace

    tr = load_trace(agentic_trace)
    cols = {"prompt_id": tr.prompt_id, "sample_idx": tr.sample_idx, "prompt_len": tr.prompt_len,
            "response_len": tr.response_len, "step": tr.step, "turns": tr.turns,
            "tool_wait_s": np.zeros(len(tr)), "tool_tokens": tr.tool_tokens}
    fast = tmp_path / "no_wait.parquet"
    write_trace(fast, cols, tr.metadata)
    cfg = dict(OVER)
    slow = simulate(tr, small_config(agentic_trace, **cfg), "sync", progress=False).metrics
    quick = simulate(load_trace(fast), small_config(fast, **cfg), "sync", progress=False).metrics
    assert quick["step_time_mean_s"] < slow["step_time_mean_s"]
    assert quick["rollout_bubble_ratio"] < slow["rollout_bubble_ratio"]


class _Watched:
    """Wraps dora.sim.run.make_policy: the dora policy it makes records the tool calls it is told
    of and the largest load any instance then holds."""

    def __init__(self, monkeypatch):
        import dora.sim.run as run
        from dora.sched.policies.dora import DoraPolicy

        calls, peak, made = [], [0], []

        class Watched(DoraPolicy):
            def on_tool_call(self, traj, inst, tokens):
                calls.append((self.now, traj, inst, tokens))
                super().on_tool_call(traj, inst, tokens)
                peak[0] = max(peak[0], max(len(i.active) for i in self.view.instances.values()))

        plain = run.make_policy

        def make(name, cfg, group_size):
            p = Watched(plain(name, cfg, group_size).cfg)  # (the config with its group size resolved)
            made.append(p)
            return p

        monkeypatch.setattr(run, "make_policy", make)
        self.calls, self.peak, self.made = calls, peak, made


def test_the_simulator_tells_the_policy_of_every_tool_call(agentic, agentic_trace, monkeypatch):
    w = _Watched(monkeypatch)
    r = simulate(agentic, small_config(agentic_trace, **OVER), "dora", progress=False)
    ev = r.events
    name = ev["event"].astype(str)
    done = set(ev.loc[name == "finish", "trajectory"])  # never aborted: every call of theirs is told
    rows = ev[name.isin(["tool_start", "tool_end"]) & ev["trajectory"].isin(done)]
    want = sorted(zip(rows["t_s"], rows["trajectory"], rows["instance"],
                      np.where(rows["event"].astype(str) == "tool_start", -1, rows["tokens"])))
    got = sorted(c for c in w.calls if c[1] in done)
    assert len(want) > 100 and got == [(float(t), int(j), int(i), int(k)) for t, j, i, k in want]


@pytest.mark.parametrize("lend,faults", [(False, False), (True, False), (True, True)])
def test_dora_lends_the_slot_of_a_trajectory_in_a_tool_call(agentic, agentic_trace, monkeypatch, lend, faults):
    """With `tool_calls` on, an instance takes new groups into the slots of trajectories waiting
    for a tool call (more trajectories than slots), gives each slot back when the call ends (or
    the trajectory is lost with its instance), and C1-C3 hold; off, no instance holds more than
    its slots."""
    w = _Watched(monkeypatch)
    over = {**OVER, "policy.dora.tool_calls": lend}
    if faults:
        over.update({"faults.mtbf_s": 60.0, "faults.repair_s": 5.0})
    cfg = small_config(agentic_trace, **over)
    r = simulate(agentic, cfg, "dora", progress=False)
    m = r.metrics
    assert m["steps"] == 4 and m["c1_violations"] == m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
    assert log_problems(r.events) == [] and (m["instance_failures"] > 0) == faults
    slots = cfg.cluster.max_seqs
    assert (w.peak[0] > slots) == lend and w.peak[0] <= slots + (slots if lend else 0)
    p = w.made[0]
    lent = {i: list(p._lent.values()).count(i) for i in p.view.instances}
    assert all(inst.max_seqs == slots + lent[i] for i, inst in p.view.instances.items())
