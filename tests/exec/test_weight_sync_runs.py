"""Real runs with collective weight sync (rollout.weight_sync=collective) on the hf backend:
a multi-version policy keeps C1-C3 with one weight_sync_start/end pair per publication carrying
the model's parameter bytes, and a run with a killed engine (replaced, caught up by a broadcast)
and an injected failed load still completes."""

from __future__ import annotations

import pytest

from dora.config import build
from dora.exec.run_config import ExecConfig
from dora.sched.registry import POLICIES
from dora.sched.record import recorded, replay

STEPS, B, G = 3, 2, 4


def _config(model, out, runtime: str, faults: dict | None = None, **extra) -> ExecConfig:
    return build(ExecConfig, {
        "model": str(model), "policies": ["dora"], "steps": STEPS, "out": str(out), "runtime": runtime,
        "rollout": {"instances": 2, "backend": "hf", "max_num_seqs": 16, "max_model_len": 512,
                    "weight_sync": "collective"},
        "task": {"num_prompts": 64, "max_new_tokens": 96},
        "trainer": {"threads": 1},
        "policy": {"eta": 2, "batch_size": B, "group_size": G, "sync": {"colocated": False},
                   "dora": {"repartition_load": 0.75}},
        "faults": faults or {}, **extra,
    })


def _run(cfg: ExecConfig):
    from dora.exec.run import run_policies

    try:
        (res,) = run_policies(cfg, progress=False)
    finally:
        if cfg.runtime == "ray":
            import ray

            ray.shutdown()
    return res


def _param_bytes(model_dir) -> int:
    from dora.exec.config import TrainerConfig
    from dora.exec.trainer import Trainer

    sd = Trainer(model_dir, TrainerConfig(device="cpu")).state_dict_for_publish()
    return sum(t.numel() * t.element_size() for t in sd.values())


def _guarantees(cfg, res) -> None:
    m = res.metrics
    assert m["steps"] == cfg.steps and m["trained_samples"] == cfg.steps * B * G
    assert m["c1_violations"] == 0 and m["c2_lost"] == 0 and m["c2_duplicated"] == 0
    assert m["c3_violations"] == 0 and m["staleness_max"] <= cfg.policy.eta
    assert replay(recorded(res.events), POLICIES["dora"](cfg.policy)) == []


def _rows(df, event: str):
    return df[df["event"] == event]


def test_collective_run_keeps_the_constraints_and_logs_each_sync(tiny_model_dir, tmp_path):
    pytest.importorskip("ray")
    cfg = _config(tiny_model_dir, tmp_path, "ray")
    res = _run(cfg)
    _guarantees(cfg, res)
    df = res.events
    start, end = _rows(df, "weight_sync_start"), _rows(df, "weight_sync_end")
    pubs = _rows(df, "publish")
    assert list(start["version"]) == list(end["version"]) == list(pubs["version"]) == [1, 2, 3]
    nbytes = _param_bytes(tiny_model_dir)
    assert (end["tokens"] == nbytes).all() and (end["dur_s"] > 0).all()
    assert all("staged on [0, 1]" in d for d in end["detail"])
    assert (start["t_s"].to_numpy() <= end["t_s"].to_numpy()).all()
    assert (end["t_s"].to_numpy() <= pubs["t_s"].to_numpy()).all()
    m = res.metrics
    assert m["weight_syncs"] == 3 and m["weight_sync_bytes"] == 3 * nbytes and m["weight_sync_s_mean"] > 0
    loads = _rows(df, "load_end")
    assert len(loads) >= 2 and set(loads["version"]) <= {1, 2, 3}
    from dora.perfetto import trace_events

    slices = [e for e in trace_events(df)["traceEvents"] if e.get("cat") == "weights" and e["pid"] == 1]
    assert [e["args"]["bytes"] for e in slices] == [nbytes] * 3


def test_collective_run_survives_a_killed_engine_and_a_failed_load(tiny_model_dir, tmp_path):
    """On Ray: engine 0 killed once version 1 is out (a replacement joins the group and loads the
    newest version), and instance 1's first load of a new version fails (retried from its stage).
    (Not "of a version >= 2": on a loaded host instance 1 could serve version 1 to the end.) Six
    steps, not three: the kill waits for a finish after version 1 while engine 0 holds live
    trajectories, and in about one run in six of three steps the last publication came first."""
    pytest.importorskip("ray")
    cfg = _config(tiny_model_dir, tmp_path, "ray", {"kill_instance_at_step": 1, "kill_instance": 0,
                                                    "restart_instances": True, "load_fail_at": [[1, 1]]}, steps=6)
    res = _run(cfg)
    _guarantees(cfg, res)
    df = res.events
    assert list(_rows(df, "fail")["instance"]) == [0]
    assert list(_rows(df, "recover")["instance"]) == [0]
    lf = _rows(df, "load_fail")
    assert list(lf["instance"]) == [1]
    end = _rows(df, "weight_sync_end")
    assert (end["tokens"] == _param_bytes(tiny_model_dir)).all()
    assert set(_rows(df, "publish")["version"]) <= set(end["version"])
