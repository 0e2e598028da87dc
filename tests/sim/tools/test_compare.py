"""`python -m dora.sim compare`: two known event logs, their metrics side by side with relative errors."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from dora.eventlog import write_events
from dora.sim.tools.compare import HEADLINE, compare_files, main, rel_err
from dora.sim.cost import CostModel
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_config


def _scaled(cost: CostModel, k: float) -> dict:
    d = asdict(cost)
    for name, v in d.items():
        if name.endswith("_s") or "_s_per_" in name:
            d[name] = v * k
    return d


@pytest.fixture(scope="module")
def logs(small_trace, tmp_path_factory):
    """sync on the small trace, and the same with every time coefficient doubled (a run exactly 2x slower)."""
    tmp = tmp_path_factory.mktemp("cmp")
    trace = load_trace(small_trace)
    paths = []
    for k in (1.0, 2.0):
        over = {"steps": 4, "policy.sync.colocated": False}  # disaggregated: publication takes time
        cfg = small_config(small_trace, **over)
        cfg = small_config(small_trace, **over, cost=_scaled(cfg.cost, k))
        r = simulate(trace, cfg, "sync", progress=False)
        p = tmp / f"ev{k}.parquet"
        write_events(r.events, p)
        paths.append((p, r.metrics))
    return paths


def test_twice_slower_run(logs, tmp_path, capsys):
    (real, m1), (sim, m2) = logs
    res = compare_files(real, sim)
    assert res["real"]["step_time_mean_s"] == pytest.approx(m1["step_time_mean_s"])
    assert res["rel_err"]["step_time_mean_s"] == pytest.approx(1.0, rel=1e-6)
    assert res["rel_err"]["e2e_samples_per_s"] == pytest.approx(-0.5, rel=1e-6)
    assert res["rel_err"]["bubble_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert res["rel_err"]["staleness_mean"] == 0.0  # sync: 0 and 0
    for k in ("train_step_s", "weight_load_s", "publish_s", "segment_s_per_token"):
        assert res["activities"][k]["rel_err"] == pytest.approx(1.0, rel=1e-6), k
    out = tmp_path / "cmp.json"
    assert main([str(real), str(sim), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for k in HEADLINE:
        assert k in text
    assert "+100.0%" in text and "-50.0%" in text
    data = json.loads(out.read_text())
    assert set(HEADLINE) <= set(data["rel_err"])
    assert data["rel_err"]["step_time_mean_s"] == pytest.approx(1.0, rel=1e-6)
    assert main([str(real), str(real), "--max-rel-err", "0.1"]) == 0
    assert main([str(real), str(sim), "--max-rel-err", "0.1"]) == 1


def test_rel_err_edge_cases():
    assert rel_err(2.0, 1.0) == -0.5
    assert rel_err(0.0, 0.0) == 0.0
    assert rel_err(0.0, 1.0) is None
    assert rel_err(float("nan"), 1.0) is None


def test_missing_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope.parquet"), str(tmp_path / "x.parquet")])
    assert e.value.code == 2
    assert "nope.parquet" in capsys.readouterr().err
