"""The real executor end to end: the tiny model trains under each policy with 2 engines on Ray.

The default suite runs the transformers (`hf`) backend, on Ray and in-process; `-m slow` runs
the same with vLLM on Ray (the vLLM engines themselves are tested in the default suite).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dora.config import build
from dora.exec.run_config import ExecConfig
from dora.sched.registry import POLICIES, names
from dora.sched.record import recorded, replay

ALL = list(names())  # every registered policy


def _config(model, backend: str, out, runtime: str = "ray") -> ExecConfig:
    return build(ExecConfig, {
        "model": str(model), "policies": ALL, "steps": 3, "out": str(out), "runtime": runtime,
        "rollout": {"instances": 2, "backend": backend, "max_num_seqs": 16, "max_model_len": 512},
        "task": {"num_prompts": 64, "max_new_tokens": 96},
        "trainer": {"threads": 1},
        "policy": {"eta": 2, "batch_size": 2, "group_size": 4, "sync": {"colocated": False},
                   "dora": {"repartition_load": 0.75}},
    })


@pytest.fixture(scope="module", params=["hf", "hf-local", pytest.param("vllm", marks=pytest.mark.slow)])
def runs(request, tiny_model_dir, tmp_path_factory):
    """All five policies on 2 engines: on Ray (hf; vllm under -m slow), and in-process without Ray."""
    pytest.importorskip("ray")
    if request.param == "vllm":
        pytest.importorskip("vllm")
    import ray

    from dora.exec.run import run_policies

    backend, _, runtime = request.param.partition("-")
    cfg = _config(tiny_model_dir, backend, tmp_path_factory.mktemp("exec"), runtime or "ray")
    try:
        results = run_policies(cfg, progress=False)
    finally:
        ray.shutdown()
    return cfg, {r.policy: r for r in results}


@pytest.mark.parametrize("policy", ALL)
def test_trains_three_steps_within_constraints(runs, policy):
    cfg, res = runs
    m = res[policy].metrics
    assert m["steps"] == 3 and m["trained_samples"] == 3 * 2 * 4
    assert m["c2_lost"] == 0 and m["c2_duplicated"] == 0
    assert m["staleness_max"] <= cfg.policy.eta and m["c3_violations"] == 0
    if policy != "partial":
        assert m["c1_violations"] == 0
    assert m["e2e_samples_per_s"] > 0 and 0 <= m["bubble_ratio"] <= 1
    steps = res[policy].steps
    assert [s["step"] for s in steps] == [1, 2, 3] and all("reward_mean" in s for s in steps)
    assert (cfg.out and (res[policy].config["instances"] == 2))


@pytest.mark.parametrize("policy", ALL)
def test_replaying_the_log_gives_the_same_decisions(runs, policy):
    cfg, res = runs
    rows = recorded(res[policy].events)
    assert len(rows) > 10
    assert replay(rows, POLICIES[policy](cfg.policy)) == []


def test_recorded_trace_is_a_valid_trace(runs, tmp_path):
    from dora.exec.recorded import write_recorded_trace
    from dora.trace import load_trace

    _, res = runs
    p = write_recorded_trace(res["dora"], tmp_path / "rec.parquet")
    tr = load_trace(p)
    assert len(tr) == 3 * 2 * 4 and tr.group_size == 4
    assert tr.metadata["generator"] == "dora.exec"


def test_engines_answer_kv_reads(tiny_model_dir, tmp_path, monkeypatch):
    """ReadKV in the executor: a policy that asks after every finish gets each engine's prompt +
    generated tokens of its running requests, and the answers are in the log for replay."""
    import json

    from dora.exec.run import run_policies

    class Reading(POLICIES["sync"]):
        def on_finished(self, traj, inst, group_done):
            super().on_finished(traj, inst, group_done)
            self.read_kv([1, 0])

    monkeypatch.setitem(POLICIES, "sync", Reading)
    cfg = _config(tiny_model_dir, "hf", tmp_path, "local")
    cfg = replace(cfg, policies=["sync"], steps=2)
    (res,) = run_policies(cfg, progress=False)
    reads = [json.loads(d)["in"] for _, d in recorded(res.events) if '"type":"KVRead"' in d]
    assert len(reads) >= 2 * 2 * 4 - 1  # one per finish (the last of a step may find nothing running)
    assert all(r["instances"] == [0, 1] and len(r["used"]) == 2 and min(r["used"]) >= 0 for r in reads)
    assert any(u > 0 for r in reads for u in r["used"])
