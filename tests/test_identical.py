"""benchmarks/identical.py: a tree agrees with itself; a changed metric is reported."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, load_benchmark

SCRIPT = REPO / "benchmarks" / "identical.py"


def test_a_tree_is_identical_to_itself(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--tree", str(REPO), "--tree", str(REPO), "--only",
                        "256x8/sync", "--out", str(tmp_path / "d.json")], capture_output=True, text=True)
    assert p.returncode == 0 and "1 runs: identical" in p.stdout, p.stdout + p.stderr
    assert '"e2e_samples_per_s"' in (tmp_path / "d.json").read_text()


def test_differences_name_the_run_and_the_metric():
    mod = load_benchmark("identical")
    a = {"r": {"metrics": {"x": 1.0, "y": 2}, "events": {"rows": 3}}}
    b = {"r": {"metrics": {"x": 1.0, "y": 3}, "events": {"rows": 3}}}
    assert mod.differences(a, a) == [] and mod.differences(a, b) == ["r y: 2 != 3"]
