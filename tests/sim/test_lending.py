"""Lending rollout instances to the trainer in the simulator: the trainer's devices, the resize,
the rows and the bubbles, hand-computed on a scripted policy."""

from __future__ import annotations

import pytest

from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_config, write_lengths

T0, T1, RESIZE, RESHARD = 1.0, 0.01, 0.7, 0.3
COST = {"decode_base_s": 0.01, "decode_expert_s": 0.0, "decode_per_seq_s": 0.001, "decode_per_ctx_token_s": 0.0,
        "prefill_per_token_s": 0.0, "weight_load_s": 2.0, "publish_s": 0.5, "train_base_s": T0,
        "train_device_s_per_token": T1, "trainer_resize_s": RESIZE, "colocated_reshard_s": RESHARD,
        "moe_imbalance_cv": 0.0}


def _scripted(monkeypatch, act):
    """Disaggregated `sync` that calls act(policy, version) first at each publication."""
    from dora.sched.registry import POLICIES

    class Scripted(POLICIES["sync"]):
        def on_published(self, version):
            act(self, version)
            super().on_published(version)

    monkeypatch.setitem(POLICIES, "sync", Scripted)


def _run(tmp_path, steps: int = 3):
    """Groups of two (responses 3 and 5, prompts of 10: 28 trained tokens a step) on two
    instances of one device, a trainer of one device."""
    trace = write_lengths(tmp_path / "t.parquet", [[3, 5]] * 4, prompt_len=10)
    cfg = small_config(trace, **{"steps": steps, "cluster.instances": 2, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 4, "cluster.kv_tokens": 1000, "policy.batch_size": 1,
                                 "policy.eta": 1, "policy.sync.colocated": False, "cost": COST})
    return simulate(load_trace(trace), cfg, "sync", progress=False)


def _rows(ev, name):
    return ev[ev["event"] == name].sort_values("t_s")


def test_a_lent_instance_trains_and_comes_back(tmp_path, monkeypatch):
    """Instance 1 is lent at the first publication and taken back at the second.
    Step 1 on 1 device: 1 + 0.01·28 = 1.28 s. Step 2 on 2 devices: 0.7 s of resize, then
    1 + 0.01·28/2 = 1.14 s (busy 2.28 device-s, 1.14 of them on the lent device). Step 3 on 1
    device again: 0.7 + 1.28 s. Instance 1 serves again 0.3 s (the reshard) after the second
    publication, holding version 2."""
    def act(policy, version):
        inst = policy.view.instances[1]
        if version == 1:
            policy.lend(inst)
        elif version == 2:
            policy.take_back(inst)

    _scripted(monkeypatch, act)
    r = _run(tmp_path)
    ev = r.events
    start, end, pub = _rows(ev, "train_start"), _rows(ev, "train_end"), _rows(ev, "publish")
    span = end["t_s"].to_numpy() - start["t_s"].to_numpy()
    assert span == pytest.approx([1.28, RESIZE + 1.14, RESIZE + 1.28], rel=1e-12)
    assert end["dur_s"].tolist() == pytest.approx([1.28, 1.14, 1.28], rel=1e-12)
    assert end["busy_s"].tolist() == pytest.approx([1.28, 2.28, 1.28], rel=1e-12)
    lent = _rows(ev, "train_lent")
    assert lent["tokens"].tolist() == [1] and lent["busy_s"].tolist() == pytest.approx([1.14], rel=1e-12)
    lend, back = _rows(ev, "lend"), _rows(ev, "return")
    assert lend["instance"].tolist() == [1] and lend["tokens"].tolist() == [1]
    assert lend["t_s"].iloc[0] == pytest.approx(pub["t_s"].iloc[0], rel=1e-12)
    assert back["instance"].tolist() == [1] and back["version"].tolist() == [2]
    assert back["t_s"].iloc[0] == pytest.approx(pub["t_s"].iloc[1] + RESHARD, rel=1e-12)
    # the lent device's training counts for the rollout devices, not the trainer's
    m, t_end = r.metrics, float(_rows(ev, "run_end")["t_s"].iloc[0])
    assert m["trainer_bubble_ratio"] == pytest.approx(1 - (1.28 + 1.14 + 1.28) / t_end, rel=1e-9)
    assert 0.0 <= m["rollout_bubble_ratio"] <= 1.0
    assert m["c1_violations"] == m["c2_lost"] == m["c3_violations"] == 0


def test_the_body_refuses_to_lend_an_instance_not_serving_drained(tmp_path, monkeypatch):
    from dora.sched import actions as A

    def act(policy, version):
        if version == 1:
            policy._out.append(A.LendInstance(1))  # the first is drained: lent
            policy._out.append(A.LendInstance(1))  # lent already: not serving

    _scripted(monkeypatch, act)
    with pytest.raises(RuntimeError, match="policy bug: lent instance 1, which is not drained"):
        _run(tmp_path)


def test_the_body_refuses_to_take_back_an_instance_twice(tmp_path, monkeypatch):
    from dora.sched import actions as A

    def act(policy, version):
        if version == 1:
            policy.lend(policy.view.instances[1])
        elif version == 2:
            policy._out.append(A.ReturnInstance(1))
            policy._out.append(A.ReturnInstance(1))  # on its way back already

    _scripted(monkeypatch, act)
    with pytest.raises(RuntimeError, match="policy bug: took back instance 1, which is not lent"):
        _run(tmp_path)


def test_a_colocated_run_cannot_lend(tmp_path, monkeypatch):
    from dora.sched import actions as A

    def act(policy, version):
        assert not policy.can_lend  # the body said so
        policy._out.append(A.LendInstance(0))

    _scripted(monkeypatch, act)
    trace = write_lengths(tmp_path / "t.parquet", [[3, 5]] * 4, prompt_len=10)
    cfg = small_config(trace, **{"steps": 2, "cluster.instances": 2, "cluster.trainer_devices": 1,
                                 "cluster.max_seqs": 4, "cluster.kv_tokens": 1000, "policy.batch_size": 1,
                                 "policy.eta": 1, "policy.sync.colocated": True, "cost": COST})
    with pytest.raises(RuntimeError, match="this run cannot lend"):
        simulate(load_trace(trace), cfg, "sync", progress=False)
