"""benchmarks/sim_scaling.py runs (--quick, small trace) and prints its table; no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "sim_scaling.py"


def test_quick_scaling_table(small_trace, tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--trace", str(small_trace), "--policy", "sync",
                        "--policy", "dora", "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("|")]
    assert lines[0].startswith("| policy | instances |") and "traj/s" in lines[0] and "peak RSS MiB" in lines[0]
    assert len(lines) == 2 + 4  # header, rule, 2 policies x (64, 256) instances
    rows = json.loads(out.read_text())["rows"]
    assert [(r["policy"], r["instances"]) for r in rows] == [("sync", 64), ("dora", 64), ("sync", 256), ("dora", 256)]
    for r in rows:
        assert r["steps"] == 2 and r["batch"] == f"{r['instances'] // 2} x 8"
        assert r["trajectories"] >= r["trained_samples"] == 2 * (r["instances"] // 2) * 8
        assert r["peak_rss_mib"] >= r["load_rss_mib"] > 0 and r["wall_s"] > 0


def test_bad_instances_exit_2(small_trace, tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--instances", "64,lots", "--trace", str(small_trace)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--instances" in p.stderr
