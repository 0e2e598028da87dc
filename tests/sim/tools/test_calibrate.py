"""`python -m dora.sim calibrate`: recovers known coefficients from a synthetic profile; the cost file loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from dora.errors import InputError
from dora.profile import FORMAT, TABLES
from dora.sim.__main__ import main as sim_main
from dora.sim.cli import parser as sim_parser
from dora.sim.cli import resolve_config
from dora.sim.tools.calibrate import calibrate, main
from dora.sim.cost import CostModel

TRUE = dict(decode_base_s=2.5e-3, decode_per_seq_s=1.2e-4, decode_per_ctx_token_s=3.0e-7, prefill_per_token_s=4.0e-5,
            train_base_s=0.8, train_device_s_per_token=2.0e-4)


def synthetic_profile(backend: str = "vllm", noise: float = 0.0, seed: int = 0, outliers: int = 0) -> dict:
    """A profile whose timings follow TRUE exactly (plus optional relative noise and idle-gap outliers)."""
    rng = np.random.default_rng(seed)
    n = 400
    running = rng.integers(1, 33, n)
    ctx = running * rng.integers(20, 600, n)
    prefill = np.where(rng.random(n) < 0.2, rng.integers(10, 300, n), 0)
    dt = (TRUE["decode_base_s"] + TRUE["decode_per_seq_s"] * running + TRUE["decode_per_ctx_token_s"] * ctx
          + (TRUE["prefill_per_token_s"] * prefill if backend == "vllm" else 0.0))
    dt = dt * (1 + noise * rng.standard_normal(n))
    dt[:outliers] *= 50  # a step that spanned an idle gap or a stall
    prof = {"format": FORMAT, "policy": "dora", "backend": backend, "model": "m", "instances": 2,
            "devices_per_instance": 1, "trainer_devices": 1, "max_num_seqs": 32, "engine_startup_s": [1.0, 1.0],
            "wall_s": 10.0}
    prof.update({name: {c: [] for c in cols} for name, cols in TABLES.items()})
    prof["decode_steps"] = {"instance": [0] * n, "t_s": list(range(n)), "running": running.tolist(),
                            "ctx_tokens": ctx.tolist(), "prefill_tokens": prefill.tolist(),
                            "decode_tokens": running.tolist(), "dt_s": dt.tolist()}
    if backend == "hf":
        toks = rng.integers(10, 2000, 50)
        prof["prefills"] = {"instance": [0] * 50, "t_s": list(range(50)), "sequences": [1] * 50,
                            "tokens": toks.tolist(), "dt_s": (TRUE["prefill_per_token_s"] * toks).tolist()}
    prof["weight_loads"] = {"instance": [0, 1, 0], "version": [1, 1, 2], "mode": ["drain"] * 3,
                            "dt_s": [0.30, 0.50, 0.40]}
    tt = rng.integers(500, 6000, 8)
    prof["train_steps"] = {"tokens": tt.tolist(), "samples": [16] * 8,
                           "dt_s": (TRUE["train_base_s"] + TRUE["train_device_s_per_token"] * tt).tolist()}
    prof["publishes"] = {"version": [1, 2], "dt_s": [0.1, 0.3]}
    return prof


@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_recovers_known_coefficients(backend):
    cost, fits = calibrate([synthetic_profile(backend)])
    for k, v in TRUE.items():
        assert getattr(cost, k) == pytest.approx(v, rel=1e-6), k
    assert cost.weight_load_s == pytest.approx(0.4)
    assert cost.colocated_reshard_s == pytest.approx(0.4)
    assert cost.publish_s == pytest.approx(0.2)
    assert cost.decode_expert_s == 0.0 and cost.moe_imbalance_cv == 0.0
    decode = next(f for f in fits if f.name == "decode step")
    assert decode.r2 == pytest.approx(1.0) and abs(decode.rel_total) < 1e-9


def test_request_latency_from_request_stamps():
    """request_latency_s = mean(submitted - sent) + mean(seen - finished); none recorded -> 0."""
    assert calibrate([synthetic_profile()])[0].request_latency_s == 0.0
    prof = synthetic_profile()
    prof["requests"] = {"instance": [0, 1, 0], "t_sent_s": [1.0, 2.0, 3.0], "t_submit_s": [1.01, 2.03, 3.02],
                        "t_first_token_s": [1.1, 2.1, 3.1], "t_finish_s": [1.5, 2.5, 3.5],
                        "t_seen_s": [1.505, 2.515, 3.51], "new_tokens": [5, 7, 9]}
    cost, fits = calibrate([prof])
    assert cost.request_latency_s == pytest.approx(0.02 + 0.01)
    assert next(f for f in fits if f.name == "request").rows == 3


def test_noise_and_outliers():
    cost, fits = calibrate([synthetic_profile(noise=0.02, outliers=5, seed=3)])
    decode = next(f for f in fits if f.name == "decode step")
    assert decode.dropped >= 5  # the 50x steps are not fitted
    assert cost.decode_base_s == pytest.approx(TRUE["decode_base_s"], rel=0.1)
    assert cost.decode_per_seq_s == pytest.approx(TRUE["decode_per_seq_s"], rel=0.1)
    assert cost.decode_per_ctx_token_s == pytest.approx(TRUE["decode_per_ctx_token_s"], rel=0.1)
    assert cost.prefill_per_token_s == pytest.approx(TRUE["prefill_per_token_s"], rel=0.1)
    assert decode.r2 > 0.9


def test_cli_writes_a_cost_file_that_cost_loads(tmp_path, capsys):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(synthetic_profile()))
    out = tmp_path / "cost.yaml"
    assert main([str(prof), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "decode_per_ctx_token_s" in table and "R^2" in table
    data = yaml.safe_load(out.read_text())
    CostModel(**data).validate()
    cfg = resolve_config(sim_parser().parse_args(["--cost", str(out)]))
    assert cfg.cost.decode_per_seq_s == pytest.approx(TRUE["decode_per_seq_s"])
    assert cfg.cost.train_base_s == pytest.approx(TRUE["train_base_s"])
    assert sim_main(["calibrate", str(prof), "--out", str(tmp_path / "c2.yaml")]) == 0  # dispatch via dora.sim


def test_bad_profiles_refused(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit) as e:
        main([str(bad), "--out", str(tmp_path / "c.yaml")])
    assert e.value.code == 2
    p = synthetic_profile()
    p["decode_steps"]["dt_s"][3] = "x"
    bad.write_text(json.dumps(p))
    with pytest.raises(SystemExit):
        main([str(bad), "--out", str(tmp_path / "c.yaml")])
    assert "decode_steps" in capsys.readouterr().err
    mixed = [synthetic_profile("vllm"), synthetic_profile("hf")]
    from dora.errors import InputError

    with pytest.raises(InputError, match="mix backends"):
        calibrate(mixed)
    assert not (tmp_path / "c.yaml").exists()


def test_host_cores_fits_uncontended_costs():
    """--host-cores: decode steps that overlap a trainer step are left out, and a trainer step that
    started while k engines decoded is divided by max(1, (k + 1) / cores) before the fit."""
    prof = synthetic_profile()
    d = prof["decode_steps"]
    prof["t0_wall_s"] = 0.0  # decode steps end at t = 0, 1, 2, ... s (relative = absolute here)
    starts = [100.5] + [400.0 + 10 * i for i in range(7)]  # 8 windows, one per train step
    starts[1] = float(d["t_s"][300]) - d["dt_s"][300] / 2  # starts while engine 0 decodes step 300
    prof["train_windows"] = {"t_start_s": starts, "t_end_s": [s + 50.0 if i == 0 else s + 1.0 for i, s in enumerate(starts)]}
    for i in range(101, 151):  # the engine steps under the first trainer step ran 1.5x slower
        d["dt_s"][i] *= 1.5
    prof["train_steps"]["dt_s"][1] *= 2.0  # one engine busy + the trainer on 1 core
    cost, _ = calibrate([prof], host_cores=1.0)
    for k, v in TRUE.items():
        assert getattr(cost, k) == pytest.approx(v, rel=1e-6), k
    assert cost.host_cores == 1.0
    plain, _ = calibrate([prof])
    assert plain.host_cores == 0.0
    assert plain.train_device_s_per_token != pytest.approx(TRUE["train_device_s_per_token"], rel=1e-3)


def test_host_cores_needs_train_windows():
    with pytest.raises(InputError, match="train_windows"):
        calibrate([synthetic_profile()], host_cores=2.0)
