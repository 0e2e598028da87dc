"""benchmarks/exec_speedup_predict.py's pure parts (rows, ratios, table, profile diagnosis, bad input) and
benchmarks/exec_speedup.py's correction labels, staleness histogram and merge across corrections. No engines."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.conftest import REPO, load_benchmark

PREDICT = REPO / "benchmarks" / "exec_speedup_predict.py"


@pytest.fixture(scope="module")
def pred():
    return load_benchmark("exec_speedup_predict")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("exec_speedup", "exec_speedup_for_labels")


@pytest.fixture(scope="module")
def report():
    return load_benchmark("exec_speedup_report")


def _res(real: float, sim: float) -> dict:
    return {"real": {"e2e_samples_per_s": real}, "sim": {"e2e_samples_per_s": sim}}


def test_prediction_rows_ratio_and_errors(pred):
    rows = pred.prediction_rows({"a": {"sync": _res(10.0, 12.0), "dora": _res(13.0, 15.6)},
                                 "b": {"sync": _res(10.0, 8.0), "dora": _res(13.0, 16.0)}})
    a, b = rows
    assert a["scenario"] == "a" and a["sync_err"] == pytest.approx(0.2) and a["dora_err"] == pytest.approx(0.2)
    assert a["ratio_real"] == pytest.approx(1.3) and a["ratio_pred"] == pytest.approx(1.3)
    assert a["ratio_err"] == pytest.approx(0.0)
    assert b["ratio_pred"] == pytest.approx(2.0) and b["ratio_err"] == pytest.approx(2.0 / 1.3 - 1)
    assert b["sync_err"] == pytest.approx(-0.2)


def test_ratio_and_rel_err_guard_zero_and_nan(pred):
    assert math.isnan(pred.ratio(1.0, 0.0)) and math.isnan(pred.ratio(float("nan"), 1.0))
    assert math.isnan(pred.rel_err(0.0, 1.0)) and math.isnan(pred.rel_err(1.0, float("nan")))
    assert pred.rel_err(-2.0, -1.0) == pytest.approx(0.5)


def test_markdown_table(pred):
    rows = pred.prediction_rows({"sync's profile, own devices": {"sync": _res(17.39, 18.0),
                                                                 "dora": _res(22.73, 30.0)}})
    md = pred.markdown_table(rows).splitlines()
    assert md[0].startswith("| calibration, host model | sync samples/s")
    assert md[1] == "|---|---|---|---|"
    assert md[2] == ("| sync's profile, own devices | 17.39 / 18.00 (+3.5%) | 22.73 / 30.00 (+32.0%) "
                     "| 1.31x / 1.67x (+27.5%) |")
    assert len(md) == 3


def test_scenario_names(pred):
    assert pred.scenario_name("sync", 0.0) == "sync's profile, own devices"
    assert pred.scenario_name("own", 2.0) == "own profile, 2 shared cores"


def test_profile_diagnosis_splits_decode_steps_by_training(pred):
    prof = {"wall_s": 10.0, "t0_wall_s": 100.0,
            "train_steps": {"dt_s": [1.0, 3.0]},
            "train_windows": {"t_start_s": [1.0, 5.0], "t_end_s": [2.0, 8.0]},
            # engine clock: t0 + relative time; three steps inside training, two outside, one too small, one idle gap
            "decode_steps": {"instance": [0] * 7, "t_s": [101.5, 106.0, 107.0, 103.0, 109.0, 103.5, 104.0],
                             "running": [10, 12, 9, 20, 32, 2, 16],
                             "dt_s": [0.02, 0.03, 0.04, 0.01, 0.011, 0.5, -1.0]}}
    d = pred.profile_diagnosis(prof)
    assert d["train_steps"] == 2 and d["train_step_mean_s"] == 2.0 and d["train_share_of_wall"] == 0.4
    assert d["decode_steps_busy"] == 3 and d["decode_steps_idle"] == 2
    assert d["decode_step_trainer_busy_s"] == pytest.approx(0.03)
    assert d["decode_step_trainer_idle_s"] == pytest.approx(0.0105)
    assert d["decode_slowdown_while_training"] == pytest.approx(0.03 / 0.0105)


def test_other_engine_effect_splits_small_steps_by_the_other_engine(pred):
    # engine 0 steps at 0.01 (engine 1 also steps in that 50 ms bin) and at 0.12 (engine 1 idle);
    # the step with 20 running sequences and the idle gap (dt -1) are left out
    d = {"instance": [0, 1, 0, 0, 1], "t_s": [0.01, 0.02, 0.12, 0.03, 0.3],
         "running": [2, 30, 3, 20, 4], "dt_s": [0.014, 0.02, 0.007, 0.05, -1.0]}
    e = pred.other_engine_effect(d)
    assert e["tail_step_other_engine_busy_s"] == pytest.approx(0.014) and e["tail_steps_other_busy"] == 1
    assert e["tail_step_other_engine_idle_s"] == pytest.approx(0.007) and e["tail_steps_other_idle"] == 1


def test_missing_recorded_run_is_one_line_exit_2(tmp_path):
    (tmp_path / "runs").mkdir()
    out = tmp_path / "p.json"
    p = subprocess.run([sys.executable, str(PREDICT), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "o"),
                        "--json", str(out)], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2
    assert "no sync.json" in p.stderr and "--record" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_labels_by_correction_only_when_they_differ(bench, report):
    same = [{"policy": "sync", "correction": "tis"}, {"policy": "dora"}]
    assert report.run_labels(same) == ["sync", "dora"]
    mixed = [{"policy": "dora", "correction": "tis"}, {"policy": "dora", "correction": "off"}]
    assert report.run_labels(mixed) == ["dora+tis", "dora+off"]
    assert bench.run_name("dora", "tis") == "dora" and bench.run_name("dora", "off") == "dora-off"


def test_summary_groups_by_correction(report):
    def run(corr, seed, reward, hist):
        return {"policy": "dora", "correction": corr, "seed": seed, "final_reward": reward, "wall_s": 100.0,
                "e2e_samples_per_s": 20.0, "bubble_ratio": 0.5, "staleness_mean": 1.0, "staleness_max": 3,
                "is_ess_mean": 0.9 if corr == "tis" else 1.0, "clip_frac_mean": 0.01, "is_truncated_frac_mean": 0.0,
                "staleness_hist": hist}

    s = report.summarize([run("tis", 0, 0.2, {"0": 5, "1": 3}), run("off", 0, 0.1, {"0": 4}),
                         run("tis", 1, 0.4, {"1": 1, "4": 2})])
    assert set(s) == {"dora+tis", "dora+off"}
    assert s["dora+tis"]["seeds"] == 2 and s["dora+tis"]["final_reward"] == pytest.approx(0.3)
    assert s["dora+tis"]["staleness_hist"] == {"0": 5, "1": 4, "4": 2}
    assert list(s["dora+tis"]["staleness_hist"]) == ["0", "1", "4"]
    assert s["dora+off"]["is_ess_mean"] == 1.0 and s["dora+off"]["seeds"] == 1


def test_staleness_hist_counts_from_the_first_token(bench):
    """As dora.metrics counts it: trajectory 2's first tokens came from version 0 (its finish row),
    though its train row says 1; trajectories without segment rows fall back to the train row."""
    import pandas as pd

    ev = pd.DataFrame({"event": ["sample", "finish", "train", "train", "train", "publish", "train"],
                       "trajectory": [-1, 2, 0, 1, 2, -1, 3], "tokens": [0, 7, 5, 5, 7, 0, 5],
                       "version": [0, 0, 0, 1, 1, -1, 0], "trainer_version": [-1, -1, 2, 2, 5, 3, 0]})
    assert bench.staleness_hist(ev) == {0: 1, 1: 1, 2: 1, 5: 1}


def test_merge_keeps_the_other_correction(bench, tmp_path):
    out = tmp_path / "r.json"
    args = bench.parser().parse_args(["--json", str(out), "--merge", "--eta", "4", "--correction", "off"])
    cfg = {k: v for k, v in vars(args).items() if k in bench.SETTINGS}
    cfg["correction"] = "tis"
    runs = [{"policy": "dora", "seed": 0}, {"policy": "dora", "seed": 0, "correction": "off"}]
    out.write_text(json.dumps({"config": cfg, "runs": runs, "commands": ["a"]}))
    kept, _ = bench.earlier_runs(args, {("dora", 0)})  # redoing dora+off seed 0 keeps dora+tis seed 0
    assert kept == [{"policy": "dora", "seed": 0}]
    cfg["correction"] = "off"  # a file made with --correction off: its runs without the field are off
    out.write_text(json.dumps({"config": cfg, "runs": [{"policy": "dora", "seed": 1}], "commands": []}))
    kept, _ = bench.earlier_runs(args, set())
    assert kept == [{"policy": "dora", "seed": 1, "correction": "off"}]
    cfg["eta"] = 2  # other settings are still refused
    out.write_text(json.dumps({"config": cfg, "runs": [], "commands": []}))
    with pytest.raises(bench.InputError, match="eta"):
        bench.earlier_runs(args, set())
