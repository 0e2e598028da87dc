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
         "--batch-size", "8", "--eta", "2", "--steps", "4", "--quiet", "--set", "cluster.kv_tokens=200000",
         "--sensitivity", "0"]  # the cost-sensitivity reruns: tested once, in test_verdict_line_and_sensitivity


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
        # the bound of the run's own placement: colocated sync, dora lending instances to the trainer
        # (its default), the rollout instances alone for the others
        own = r["config"]["eta_bound"][{"sync": "eta_bound_colocated", "dora": "eta_bound_lending"}.get(
            r["policy"], "eta_bound_rollout_only")]
        assert r["metrics"]["eta_bound_placement_samples_per_s"] == own
        assert r["metrics"]["e2e_samples_per_s"] <= own <= r["metrics"]["eta_bound_samples_per_s"] * (1 + 1e-12)
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


def test_verdict_line_and_sensitivity(small_trace, tmp_path, capsys):
    out = tmp_path / "v.json"
    args = [a for a in SMALL if a not in ("--sensitivity", "0")]
    assert main(["--trace", str(small_trace), *args, "--jobs", "1", "--policy", "sync", "--policy", "partial",
                 "--policy", "dora", "--json", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    doc = json.loads(out.read_text())
    v = doc["verdict"]
    assert last == v["line"] and last.startswith(f"verdict: {v['winner']} is the fastest policy that keeps C1-C3")
    assert v["sensitivity"]["total"] == 6 and "cost perturbations of +/-20%" in last
    rates = {r["policy"]: r["metrics"]["e2e_samples_per_s"] for r in doc["runs"]}
    assert v["winner"] == max(("sync", "dora"), key=rates.get)
    assert "partial breaks C1 and is not ranked" in last  # partial continues groups across versions


def test_replay_warning(tmp_path):
    t = write_lengths(tmp_path / "few.parquet", [[20, 30, 40, 50]] * 10)
    r = run_cli("--trace", str(t), "--instances", "2", "--max-seqs", "8", "--trainer-devices", "2",
                "--devices-per-instance", "1", "--batch-size", "4", "--eta", "1", "--steps", "5", "--quiet",
                "--sensitivity", "0", "--policy", "sync")
    assert r.returncode == 0, r.stderr
    warn = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warn == [f"warning: {t} holds 10 groups and the run trains 20 (5 steps x B=4): each group is replayed "
                    "about 2.0 times; use a larger trace or fewer --steps for lengths that do not repeat"]
    r = run_cli("--trace", str(t), "--instances", "2", "--max-seqs", "8", "--trainer-devices", "2",
                "--devices-per-instance", "1", "--batch-size", "4", "--eta", "1", "--steps", "2", "--quiet",
                "--sensitivity", "0", "--policy", "sync")
    assert r.returncode == 0 and "warning" not in r.stderr


def test_gpus_gives_each_policy_its_split(small_trace, tmp_path, capsys):
    out = tmp_path / "g.json"
    args = SMALL[2:4] + SMALL[6:]  # without --instances and --trainer-devices
    assert main(["--trace", str(small_trace), *args, "--gpus", "16", "--splits", "4", "--jobs", "1",
                 "--policy", "sync", "--policy", "dora", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "16 devices (1 per rollout instance" in text and "sync colocated on all 16 devices" in text
    doc = json.loads(out.read_text())
    for r in doc["runs"]:
        c = r["config"]
        assert c["rollout_devices"] + c["trainer_devices"] == 16 or (r["policy"] == "sync" and c["rollout_devices"] == 16)
    assert {s["policy"] for s in doc["search"]} == {"sync", "dora"}


@pytest.mark.parametrize("extra, msg", [
    (["--gpus", "16", "--instances", "4"], "--gpus: replaces --instances and --trainer-devices"),
    (["--gpus", "15", "--devices-per-instance", "2"], "not a multiple of the 2 devices per rollout instance"),
    (["--gpus", "16", "--splits", "1"], "--splits 1: must be in 2..64"),
    (["--sensitivity", "1.5"], "--sensitivity 1.5: must be in [0, 1)"),
    (["--jobs", "0"], "--jobs 0: must be >= 1 process"),
])
def test_gpus_and_sensitivity_bad_input(small_trace, extra, msg):
    r = run_cli("--trace", str(small_trace), "--max-seqs", "16", "--batch-size", "8", "--steps", "2", "--quiet",
                "--set", "cluster.kv_tokens=200000", *extra)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and msg in r.stderr, r.stderr


def test_plan_needs_gpus(small_trace):
    r = run_cli("plan", "--trace", str(small_trace))
    assert r.returncode == 2 and "plan: --gpus N is required" in r.stderr and r.stderr.count("\n") == 1


def test_max_seqs_auto_prints_the_derivation(small_trace, capsys):
    assert main(["--trace", str(small_trace), "--hardware", "H100", "--model", "qwen2.5-7b", "--max-seqs", "auto",
                 "--instances", "4", "--trainer-devices", "4", "--batch-size", "8", "--steps", "2", "--quiet",
                 "--sensitivity", "0", "--policy", "sync"]) == 0
    out = capsys.readouterr().out
    assert "memory (H100 x 1, qwen2.5-7b):" in out and "940,018 KV tokens per instance" in out
    assert "(1024 slots each)" in out  # short contexts: vLLM's max_num_seqs binds


def test_max_seqs_must_be_a_count_or_auto(small_trace):
    r = run_cli("--trace", str(small_trace), "--max-seqs", "lots")
    assert r.returncode == 2 and "'lots' is neither a whole number of slots nor auto" in r.stderr


def test_gpus_sizes_slots_from_memory_unless_given(small_trace, capsys):
    args = ["--trace", str(small_trace), "--hardware", "H100", "--model", "qwen2.5-7b", "--gpus", "8", "--splits", "2",
            "--batch-size", "8", "--steps", "2", "--quiet", "--sensitivity", "0", "--jobs", "1", "--policy", "dora"]
    assert main(args) == 0
    assert "memory (H100 x 1, qwen2.5-7b):" in capsys.readouterr().out
    assert main([*args, "--max-seqs", "16"]) == 0
    out = capsys.readouterr().out
    assert "decode slots 16 as given (from memory: 1024 = min(" in out and "16 slots each" in out
