"""The profile a real run writes (dora.profile): engine steps, prefills, loads and trainer steps,
consistent with the run's event log, and calibratable (hf backend, in-process)."""

from __future__ import annotations

import pytest

from dora.config import build
from dora.exec.run_config import ExecConfig
from dora.profile import TABLES, read_profile


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory):
    from dora.exec.run import run_policies

    out = tmp_path_factory.mktemp("prof")
    cfg = build(ExecConfig, {
        "model": str(tiny_model_dir), "policies": ["dora"], "steps": 2, "out": str(out), "runtime": "local",
        "rollout": {"instances": 2, "backend": "hf", "max_num_seqs": 8, "max_model_len": 256},
        "task": {"num_prompts": 32, "max_new_tokens": 48}, "trainer": {"threads": 1},
        "policy": {"eta": 1, "batch_size": 2, "group_size": 4},
    })
    (res,) = run_policies(cfg, progress=False)
    return cfg, res


def test_profile_matches_the_event_log(run):
    cfg, res = run
    path = cfg.out + "/dora/profile.json"
    prof = read_profile(path)
    assert prof == res.profile
    assert prof["backend"] == "hf" and prof["instances"] == 2 and len(prof["engine_startup_s"]) == 2
    ev = res.events["event"].astype(str)
    steps = prof["decode_steps"]
    assert len(steps["dt_s"]) > 10
    assert set(steps["instance"]) <= {0, 1}
    assert max(steps["running"]) <= cfg.rollout.max_num_seqs and min(steps["running"]) >= 1
    assert all(c >= r for c, r in zip(steps["ctx_tokens"], steps["running"]))  # every sequence has context
    assert all(d > 0 for d in steps["dt_s"])  # hf: the forward pass alone, always timed
    # every token generated after the first (sampled by its prefill) comes from one decode step
    seg = res.events[ev.isin(["finish", "abort", "migrate_out", "end", "interrupt"]).to_numpy()]
    prefilled = len(prof["prefills"]["dt_s"])
    assert prefilled > 0 and sum(prof["prefills"]["sequences"]) >= len(res.events[(ev == "dispatch").to_numpy()])
    assert sum(steps["decode_tokens"]) <= int(seg["tokens"].sum())
    assert len(prof["train_steps"]["dt_s"]) == cfg.steps == len(prof["publishes"]["dt_s"])
    assert sum(prof["train_steps"]["samples"]) == res.metrics["trained_samples"]
    assert len(prof["weight_loads"]["dt_s"]) == int((ev == "load_end").sum()) == len(prof["engine_loads"]["dt_s"])
    for name, cols in TABLES.items():
        assert set(prof[name]) == set(cols), name
    # one request row per finished segment, its stamps in causal order (driver perf_counter vs the
    # engines' time.time(): allow a millisecond of clock skew)
    req = prof["requests"]
    fin = res.events[(ev == "finish").to_numpy()]
    assert len(req["t_sent_s"]) == len(fin) and sum(req["new_tokens"]) == int(fin["tokens"].sum())
    for row in zip(req["t_sent_s"], req["t_submit_s"], req["t_first_token_s"], req["t_finish_s"], req["t_seen_s"]):
        assert all(b >= a - 1e-3 for a, b in zip(row, row[1:])), row


def test_old_profiles_without_requests_still_read(run, tmp_path):
    import json

    _, res = run
    old = {k: v for k, v in res.profile.items() if k != "requests"}
    p = tmp_path / "old.json"
    p.write_text(json.dumps(old))
    assert read_profile(p)["requests"] == {c: [] for c in TABLES["requests"]}


def test_profile_calibrates(run):
    from dora.sim.tools.calibrate import calibrate

    _, res = run
    cost, fits = calibrate([res.profile])
    cost.validate()
    assert cost.decode_base_s + cost.decode_per_seq_s > 0 and cost.train_device_s_per_token >= 0
    assert {f.name for f in fits} == {"decode step", "prefill", "weight load", "publish", "train step", "request"}
    assert 0 < cost.request_latency_s < 1.0
