"""benchmarks/exec_gpu_collect.py: runs gathered from a hand-made exec_gpu.sh folder, the table's
ratios and weight-sync times by hand, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from dora.body import weight_sync_row
from dora.eventlog import EventLog, write_events
from tests.conftest import REPO, load_benchmark

SCRIPT = REPO / "benchmarks" / "exec_gpu_collect.py"
METRICS = dict(step_time_mean_s=1.0, bubble_ratio=0.5, staleness_mean=0.0, staleness_max=0, migrations=0,
               reprefill_tokens=0, c1_violations=0, c2_lost=0, c2_duplicated=0, c3_violations=0)


def _folder(tmp_path):
    """calib: sync 40 and dora 60 samples/s; fresh: sync 50 only. dora's log holds two broadcasts
    of 20 and 100 ms; sync's log has none."""
    for d, runs in {"calib": {"sync": 40.0, "dora": 60.0}, "fresh": {"sync": 50.0}}.items():
        (tmp_path / d).mkdir()
        for p, e2e in runs.items():
            run = {"policy": p, "config": {"seed": int(d == "fresh")}, "metrics": dict(METRICS, e2e_samples_per_s=e2e)}
            (tmp_path / d / f"{p}.json").write_text(json.dumps({"runs": [run]}))
            log = EventLog()
            if p == "dora":
                for v, (t0, t1) in enumerate([(1.0, 1.02), (2.0, 2.1)], start=1):
                    weight_sync_row(log, t0, "weight_sync_start", v)
                    weight_sync_row(log, t1, "weight_sync_end", v, nbytes=16, dur_s=t1 - t0)
            write_events(log.to_frame(), tmp_path / d / f"ev.{p}.parquet")
    # sync's seed-0 trajectories: prompt 0 answers 10 and 20 (mean 15), prompt 1 answers 30 and 50 (mean 40)
    pd.DataFrame({"prompt_id": [0, 0, 1, 1], "response_len": [10, 20, 30, 50]}).to_parquet(
        tmp_path / "calib" / "rec.sync.parquet")
    (tmp_path / "env.txt").write_text("a date\nNVIDIA H100\n")


def test_runs_and_table_by_hand(tmp_path):
    _folder(tmp_path)
    bench = load_benchmark("exec_gpu_collect")
    runs = bench.collect(tmp_path)
    by = {(r["policy"], r["seed_dir"]): r for r in runs}
    assert sorted(by) == [("dora", "calib"), ("sync", "calib"), ("sync", "fresh")] and runs[-1]["seed_dir"] == "fresh"
    dora = by[("dora", "calib")]["weight_sync_ms"]
    assert dora["n"] == 2 and abs(dora["median"] - 60.0) < 1e-6 and abs(dora["max"] - 100.0) < 1e-6
    assert by[("sync", "calib")]["weight_sync_ms"] is None
    # mean 27.5 over the 4 answers; group means 15 and 40: s.e. = std(15, 40) / sqrt(2) / 27.5 = 12.5 / 27.5
    ans = by[("sync", "calib")]["answers"]
    assert ans["mean"] == 27.5 and ans["prompts"] == 2 and abs(ans["se_rel"] - 12.5 / 27.5) < 1e-12
    assert by[("dora", "calib")]["answers"] is None  # no recorded trajectories
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in bench.table(runs).splitlines()[2:]}
    assert rows["sync"][1] == "40.0 / 50.0" and rows["sync"][2] == "1.00 / 1.00"
    assert rows["dora"][1] == "60.0" and rows["dora"][2] == "1.50" and rows["dora"][7] == "60, 100"
    assert rows["sync"][9].startswith("27.5 (45.5%) / nan")


def test_writes_json_and_refuses_a_folder_without_runs(tmp_path):
    _folder(tmp_path)
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--command", "X", "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "X" and doc["machine"] == "a date | NVIDIA H100" and len(doc["runs"]) == 3
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nowhere")], capture_output=True, text=True,
                         cwd=REPO)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no calib/ folder" in bad.stderr
