"""benchmarks/compare_trees.py: the per-configuration comparison by hand, a tree against itself end
to end (ratio 1, the second tree's runs from the cache), bad input."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import REPO, load_benchmark

SCRIPT = REPO / "benchmarks" / "compare_trees.py"


@pytest.fixture(scope="module")
def ct():
    yield load_benchmark("compare_trees")
    sys.modules.pop("robustness_grid", None)


def _runs(rows: list[tuple[str, int, float, int]]) -> pd.DataFrame:
    return pd.DataFrame([{"config": c, "replica": r, "e2e_samples_per_s": e, "c1_violations": 0, "c2_lost": 0,
                          "c2_duplicated": 0, "c3_violations": v} for c, r, e, v in rows])


def test_compare_pairs_replicas_and_counts_sure_losses(ct):
    a = _runs([("X", 0, 10.0, 0), ("X", 1, 20.0, 0), ("Y", 0, 10.0, 0), ("Y", 1, 10.0, 0)])
    b = _runs([("X", 0, 11.0, 0), ("X", 1, 22.0, 0), ("Y", 0, 9.0, 1), ("Y", 1, 9.5, 0), ("Z", 0, 5.0, 0)])
    cmp = ct.compare(a, b)
    assert list(cmp.index) == ["Y", "X"]  # Z ran in the second tree only
    # X: every replica 1.1x, so every resample too; Y: (9 + 9.5) / 20 = 0.925, resamples 0.9 to 0.95
    assert cmp.loc["X", "ratio"] == pytest.approx(1.1)
    assert (cmp.loc["X", "ci_lo"], cmp.loc["X", "ci_hi"]) == pytest.approx((1.1, 1.1))
    assert cmp.loc["Y", "ratio"] == pytest.approx(0.925)
    assert 0.9 <= cmp.loc["Y", "ci_lo"] <= cmp.loc["Y", "ci_hi"] <= 0.95
    assert cmp.loc["Y", "violations"] == 1 and cmp.loc["Y", "replicas"] == 2
    line = ct.summary_line(cmp)
    assert "mean 1.013" in line  # (1.1 + 0.925) / 2 = 1.0125 and "min 0.925 (Y)" in line and "below 0.98x on 1, of them 1 with" in line
    assert "violations 1" in line


def test_a_tree_against_itself_is_level(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--tree", str(REPO), "--tree", str(REPO), "--only",
                          "short_uniform/inst=8,load=light", "--replicas", "2", "--quiet", "--cache",
                          str(tmp_path / "cache"), "--trace-cache", str(tmp_path / "traces"), "--csv",
                          str(tmp_path / "runs.csv")], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "second tree / first mean 1.000" in out.stdout and "violations 0" in out.stdout
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert sorted(runs["tree"].unique()) == [1, 2] and len(runs) == 4


@pytest.mark.parametrize("args, message", [
    (["--tree", "."], "give exactly two source trees"),
    (["--tree", ".", "--tree", "/nonexistent"], "no dora package there"),
    (["--tree", ".", "--tree", ".", "--replicas", "0"], "must be at least 1"),
    (["--tree", ".", "--tree", ".", "--only", "no_such_family/"], "no configuration of the grid contains it"),
    (["--tree", ".", "--tree", ".", "--set", "policy.dora.no_such_knob=1"], "no_such_knob: unknown key"),
    (["--tree", ".", "--tree", ".", "--csv", "runs.txt"], "--csv"),
])
def test_bad_input_is_refused_in_one_line(args, message):
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and message in out.stderr and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
