"""`python -m dora.sim`: the table, --json with the metric names, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dora.metrics import METRIC_NAMES
from dora.sim.__main__ import main
from tests.conftest import REPO, write_lengths

SMALL = ["--instances", "8", "--max-seqs", "16", "--trainer-devices", "4", "--devices-per-instance", "1",
         "--batch-size", "8", "--eta", "2", "--steps", "4", "--quiet", "--set", "cluster.kv_tokens=200000"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dora.sim", *args], capture_output=True, text=True, cwd=REPO)


def test_all_policies_table_and_json(small_trace, tmp_path, capsys):
    out = tmp_path / "out.json"
    ev = tmp_path / "ev.parquet"
    assert main(["--trace", str(small_trace), *SMALL, "--json", str(out), "--events", str(ev)]) == 0
    text = capsys.readouterr().out
    for name in ("sync", "one_step", "partial", "laminar", "dora", "speedup_vs_sync", "bound_fraction",
                 "eta_bound_fraction", "eta_bound_samples_per_s", "bubble-free bound"):
        assert name in text
    runs = json.loads(out.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["sync", "one_step", "partial", "laminar", "dora"]
    for r in runs:
        assert set(METRIC_NAMES) <= set(r["metrics"])
        for extra in ("bound_samples_per_s", "eta_bound_samples_per_s", "eta_bound_fraction", "sim_wall_s", "events"):
            assert extra in r["metrics"]
        assert r["metrics"]["e2e_samples_per_s"] <= r["metrics"]["eta_bound_samples_per_s"]
        assert r["config"]["eta_bound"]["eta_bound_samples_per_s"] == r["metrics"]["eta_bound_samples_per_s"]
        for knob in ("eta", "batch_size", "group_size", "instances", "trainer_devices", "steps", "seed", "cost",
                     "policy"):
            assert knob in r["config"], knob
        assert (tmp_path / f"ev.{r['policy']}.parquet").is_file()
        m = r["metrics"]
        assert m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
        assert m["c1_violations"] == 0 or r["policy"] == "partial"  # partial continues groups across versions


def test_deterministic_for_a_seed(small_trace, tmp_path):
    outs = []
    for k in range(2):
        p = tmp_path / f"o{k}.json"
        assert main(["--trace", str(small_trace), *SMALL, "--policy", "dora", "--seed", "3", "--json", str(p)]) == 0
        m = json.loads(p.read_text())["runs"][0]["metrics"]
        m.pop("sim_wall_s")
        outs.append(m)
    assert outs[0] == outs[1]


def test_yaml_config_and_overrides(small_trace, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policy:\n  eta: 1\n  dora:\n    consolidate: false\ncluster:\n  instances: 6\n")
    out = tmp_path / "o.json"
    assert main(["--trace", str(small_trace), *SMALL, "--config", str(cfg), "--policy", "dora",
                 "--set", "policy.dora.repartition_load=0.75", "--json", str(out)]) == 0
    c = json.loads(out.read_text())["runs"][0]["config"]
    assert c["instances"] == 8  # the flag beats the file
    assert c["eta"] == 2 and c["policy"]["consolidate"] is False and c["policy"]["repartition_load"] == 0.75


@pytest.mark.parametrize("args, needle", [
    (["--trace", "missing.parquet"], "missing.parquet: file not found"),
    (["--eta", "-1"], "eta: must be >= 0"),
    (["--instances", "0"], "instances: must be >= 1"),
    (["--batch-size", "100000"], "batch_size: 100000 groups per step is more than"),
    (["--set", "policy.nope=1"], "policy.nope: unknown key"),
    (["--set", "cluster.max_seqs=lots"], "cluster.max_seqs: expected an integer"),
    (["--steps", "1"], "steps: must be >= 2"),
    (["--policy", "one_step", "--eta", "0"], "one_step trains every batch one version late"),
    (["--hardware", "H800"], "--hardware and --model go together"),
    (["--config", "nope.yaml"], "config file nope.yaml: not found"),
])
def test_bad_input_exits_2_with_one_line(args, needle, tmp_path):
    out = tmp_path / "o.json"
    r = run_cli(*args, "--json", str(out))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and r.stderr.strip().count("\n") == 0
    assert not out.exists() and r.stdout == ""


def test_bad_trace_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"prompt_id": [0, 0], "sample_idx": [0, 1], "prompt_len": [5, 5],
                             "response_len": [3, -2]}), p)
    r = run_cli("--trace", str(p))
    assert r.returncode == 2 and "column 'response_len', row 1" in r.stderr


def test_kv_too_small_for_trace(tmp_path):
    t = write_lengths(tmp_path / "t.parquet", [[100, 200]])
    r = run_cli("--trace", str(t), "--set", "cluster.kv_tokens=50", "--batch-size", "1")
    assert r.returncode == 2 and "kv_tokens" in r.stderr


def test_output_is_a_directory(small_trace, tmp_path):
    r = run_cli("--trace", str(small_trace), *SMALL, "--json", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr
