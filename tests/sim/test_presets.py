"""Hardware x model presets: the roofline derivation, its CLI, the cost YAML round trip, rollout_share."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import yaml

from dora.config import to_dict
from dora.errors import InputError
from dora.metrics import compute_metrics
from dora.sim.cost import CostModel
from dora.sim.presets import HARDWARE, MODELS, derive, instance_devices, main
from tests.conftest import REPO, write_lengths

# request_latency_s and host_cores belong to the executor (RPCs, polling, a shared host), not the hardware: presets leave them 0
COEFFS = [f.name for f in dataclasses.fields(CostModel) if f.name not in ("source", "moe_imbalance_cv", "request_latency_s", "host_cores")]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("hw", list(HARDWARE))
@pytest.mark.parametrize("model", list(MODELS))
def test_every_pair_derives_positive_coefficients_or_refuses(hw, model):
    cost, hints = derive(hw, model)
    for name in COEFFS:
        v = getattr(cost, name)
        if name in ("decode_expert_s", "expert_touch") and MODELS[model].experts == 0:
            assert v == 0.0
        else:
            assert v > 0, (hw, model, name)
    assert hints["devices_per_instance"] == instance_devices(HARDWARE[hw], MODELS[model])
    too_few = max(hints["devices_per_instance"] // 4, 1)
    if MODELS[model].params_b * 2 > 0.9 * HARDWARE[hw].memory_gb * too_few:
        with pytest.raises(InputError) as e:
            derive(hw, model, too_few)
        assert "\n" not in str(e.value) and "cannot hold" in str(e.value)


def test_hand_derivation_h800_qwen7b():
    """H800 (3.35 TB/s, 989 TFLOP/s) x Qwen2.5-7B (28 layers, 4 KV heads x 128), one device, eta_bw 0.8."""
    cost, hints = derive("H800", "qwen2.5-7b", 1)
    kv = 2 * 28 * 4 * 128 * 2  # 57,344 bytes per token
    assert cost.decode_per_ctx_token_s == pytest.approx(57344 / (3.35e12 * 0.8), rel=1e-12)
    assert kv / (3.35e12 * 0.8) == pytest.approx(2.1397e-8, rel=1e-4)
    # 7.6156B params, 0.5450B input embedding: 2 x 7.0706 GB read per step + 2 ms overhead
    assert cost.decode_base_s == pytest.approx(2 * 7.0706e9 / 2.68e12 + 0.002, rel=1e-4)
    assert cost.train_device_s_per_token == pytest.approx(8 * 7.0706e9 / (989e12 * 0.35), rel=1e-4)
    assert cost.weight_load_s == pytest.approx(2 * 7.6156e9 / 50e9 + 0.5, rel=1e-4)
    assert hints == {"devices_per_instance": 1}


def test_longcat_flash_numbers():
    m = MODELS["longcat-flash"]
    assert m.expert_b == pytest.approx(541.17, abs=0.01)  # 28 x 512 x 3 x 6144 x 2048
    assert m.kv_bytes_per_token == 28 * 2 * 576 * 2  # MLA latent 512 + rope 64, two blocks per layer
    assert m.ffn_experts_per_token == pytest.approx(7.94, abs=0.01)
    cost, hints = derive("H800", "longcat-flash")
    assert hints["devices_per_instance"] == 32
    assert cost.expert_touch == pytest.approx(7.94 / 512, rel=1e-3)
    assert cost.publish_s == pytest.approx(1120e9 / (8 * 50e9) + 0.5)


def test_cost_model_defaults_are_the_rounded_h800_qwen3_moe_preset():
    cost, _ = derive("H800", "qwen3-30b-a3b", 2)
    default = CostModel()
    for name in COEFFS:
        assert getattr(default, name) == pytest.approx(getattr(cost, name), rel=1e-3), name


def test_cli_prints_every_coefficient_with_inputs(capsys):
    assert main(["--hardware", "H800", "--model", "longcat-flash", "--devices-per-instance", "64"]) == 0
    out = capsys.readouterr().out
    assert "instance = 64 devices" in out
    for name in COEFFS:
        assert f"\n{name} " in out, name
    assert "64 x 3.35 TB/s x 0.8" in out and "compute-bound" in out


def test_yaml_round_trip_through_dora_sim(tmp_path):
    out = tmp_path / "h800_q7.yaml"
    r = run("dora.sim.presets", "--hardware", "H800", "--model", "qwen2.5-7b", "--yaml", str(out))
    assert r.returncode == 0, r.stderr
    expected, _ = derive("H800", "qwen2.5-7b")
    assert yaml.safe_load(out.read_text()) == to_dict(expected)
    trace = write_lengths(tmp_path / "t.parquet", [[30, 50], [40, 20], [60, 10], [25, 35]])
    js = tmp_path / "o.json"
    r = run("dora.sim", "--trace", str(trace), "--cost", str(out), "--policy", "sync", "--instances", "2",
            "--max-seqs", "4", "--trainer-devices", "2", "--devices-per-instance", "1", "--batch-size", "2",
            "--steps", "2", "--quiet", "--json", str(js))
    assert r.returncode == 0, r.stderr
    run_ = json.loads(js.read_text())["runs"][0]
    assert run_["config"]["cost"] == to_dict(expected)
    assert 0 < run_["metrics"]["rollout_share"] < 1


def test_cost_yaml_with_unknown_key_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("decode_base_s: 0.003\ndecode_bse_s: 0.1\n")
    trace = write_lengths(tmp_path / "t.parquet", [[30, 50], [40, 20]])
    r = run("dora.sim", "--trace", str(trace), "--cost", str(bad), "--policy", "sync", "--quiet")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "cost.decode_bse_s: unknown key" in r.stderr


@pytest.mark.parametrize("args,what", [
    (["--hardware", "H900", "--model", "qwen2.5-7b"], "--hardware 'H900': unknown"),
    (["--hardware", "H800", "--model", "llama-7b"], "--model 'llama-7b': unknown"),
    (["--hardware", "H800", "--model", "longcat-flash", "--devices-per-instance", "4"], "cannot hold"),
])
def test_bad_presets_exit_2_with_one_line(args, what, tmp_path):
    out = tmp_path / "c.yaml"
    r = run("dora.sim.presets", *args, "--yaml", str(out))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and what in r.stderr, r.stderr
    assert not out.exists()
    r = run("dora.sim", "--trace", "traces/moe_longtail.parquet", *args, "--quiet")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and what in r.stderr, r.stderr


def test_rollout_share_of_a_sync_like_log():
    """Publish at 0 and 10 and 30; loads end 1 s after each; generation then train; the share is
    generation / step time over the steady-state step (10 -> 30): (11..24) with a gap 15..16."""
    from dora.eventlog import EventLog

    log = EventLog({"eta": 0, "group_size": 1, "rollout_devices": 1, "trainer_devices": 1})
    a = log.add
    a(0.0, "publish", version=0)
    a(1.0, "dispatch", 0, 0, 0, 0)
    a(7.0, "finish", 0, 0, 0, 0, tokens=5)
    a(7.0, "train_start", trainer_version=0)
    a(9.0, "train_end", trainer_version=0, dur_s=2.0, busy_s=2.0)
    a(10.0, "publish", version=1, dur_s=1.0)
    a(11.0, "load_end", 0, version=1, dur_s=1.0)
    a(11.0, "dispatch", 0, 1, 1, 1)
    a(15.0, "finish", 0, 1, 1, 1, tokens=4)
    a(16.0, "dispatch", 0, 2, 2, 1)
    a(24.0, "finish", 0, 2, 2, 1, tokens=8)
    a(24.0, "train_start", trainer_version=1)
    a(27.0, "train_end", trainer_version=1, dur_s=3.0, busy_s=3.0)
    a(30.0, "publish", version=2, dur_s=3.0)
    m = compute_metrics(log.to_frame())
    assert m["rollout_share"] == pytest.approx((4 + 8) / 20)
