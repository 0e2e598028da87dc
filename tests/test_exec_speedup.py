"""benchmarks/exec_speedup.py: its statistics by hand, bad input, --merge, and a --quick real run (slow)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.conftest import REPO, load_benchmark

SCRIPT = REPO / "benchmarks" / "exec_speedup.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("exec_speedup")


@pytest.fixture(scope="module")
def report():
    return load_benchmark("exec_speedup_report")


def test_final_reward_is_the_mean_of_the_last_tenth(report):
    # 20 steps -> the last 2: mean 0.5, sample std 0.1414 -> se 0.1
    rewards = [0.0] * 18 + [0.4, 0.6]
    m, se = report.final_reward(rewards)
    assert m == pytest.approx(0.5)
    assert se == pytest.approx(0.1)
    # fewer than 10 steps: the last step, no spread
    assert report.final_reward([0.1, 0.9]) == (0.9, 0.0)
    assert all(math.isnan(x) for x in report.final_reward([]))
    assert report.mean_se([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1 / math.sqrt(3)))


def test_summary_speedup_and_staleness(report):
    def run(pol, seed, e2e, reward, smax):
        return {"policy": pol, "seed": seed, "final_reward": reward, "wall_s": 100.0 / e2e, "e2e_samples_per_s": e2e,
                "bubble_ratio": 0.5, "staleness_mean": smax / 2, "staleness_max": smax}

    s = report.summarize([run("sync", 0, 2.0, 0.5, 0), run("sync", 1, 4.0, 0.7, 0),
                         run("dora", 0, 6.0, 0.6, 2), run("dora", 1, 6.0, 0.6, 1)])
    assert s["sync"]["e2e_samples_per_s"] == 3.0
    assert s["sync"]["final_reward_se"] == pytest.approx(0.1)
    assert s["dora"]["speedup_vs_sync"] == pytest.approx(2.0)
    assert s["dora"]["staleness_max"] == 2
    assert s["dora"]["seeds"] == 2
    assert "final_eval" not in s["dora"]  # no scores: no score column
    scored = [dict(run("sync", k, 2.0, 0.5, 0), first_eval=0.4, final_eval=0.5 + 0.2 * k) for k in range(2)]
    assert report.summarize(scored)["sync"]["final_eval"] == pytest.approx(0.6)
    assert report.summarize(scored)["sync"]["final_eval_se"] == pytest.approx(0.1)


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds: must be >= 1"),
    (["--steps", "-1"], "--steps: must be >= 1"),
    (["--eta", "-2"], "--eta: must be >= 0"),
    (["--model", "/nonexistent/dir"], "not a directory"),
    (["--warm-start-reverse-frac", "1"], "--warm-start-reverse-frac: must be in [0, 1)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, message):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(SCRIPT), *argv, "--json", str(out), "--plot", str(tmp_path / "r.png")],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2
    assert message in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_merge_refuses_other_settings_and_keeps_other_runs(bench, tmp_path):
    out = tmp_path / "r.json"
    args = bench.parser().parse_args(["--json", str(out), "--merge", "--steps", "5"])
    cfg = {k: v for k, v in vars(args).items() if k in bench.SETTINGS}
    runs = [{"policy": "sync", "seed": 0}, {"policy": "dora", "seed": 0}]
    out.write_text(json.dumps({"config": cfg, "runs": runs, "commands": ["a"]}))
    kept, commands = bench.earlier_runs(args, {("dora", 0)})
    assert kept == [{"policy": "sync", "seed": 0}] and commands == ["a"]
    other = bench.parser().parse_args(["--json", str(out), "--merge", "--steps", "6"])
    with pytest.raises(bench.InputError, match="steps"):
        bench.earlier_runs(other, set())


@pytest.mark.slow
def test_quick_run_writes_json_and_plot(tmp_path):
    """Three real short runs (hf engines in-process, untrained tiny model): the JSON has one run per policy
    with the contract's keys, the same number of trained samples for each, and a PNG is written."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--quiet", "--work", str(tmp_path / "w"),
                        "--json", str(out), "--plot", str(png)], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["device"]
    assert [r["policy"] for r in doc["runs"]] == ["sync", "partial", "dora"]
    for r in doc["runs"]:
        for key in ("policy", "seed", "final_reward", "wall_s", "e2e_samples_per_s", "bubble_ratio", "staleness_max"):
            assert key in r
        assert r["trained_samples"] == 2 * 2 * 2
        assert r["c1_violations"] == 0 and r["c3_violations"] == 0
        assert 0.0 <= r["final_reward"] <= 1.0
        assert len(r["curve"]) == 2
        assert [e["step"] for e in r["eval"]] == [0, 1, 2]  # the starting model, then every version
        assert 0.0 <= r["final_eval"] <= 1.0 and 0.0 <= r["curve"][0]["zero_var_groups"] <= 1.0
    assert png.stat().st_size > 10_000
