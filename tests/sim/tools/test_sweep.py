"""`python -m dora.sim sweep`: the tidy table, equality with direct runs, linked keys, trace axes, bad input."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from dora.metrics import METRIC_NAMES
from dora.plots.sweep import read_sweep
from dora.sim.tools.sweep import main
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import REPO, small_config

BASE = ["--max-seqs", "16", "--trainer-devices", "4", "--devices-per-instance", "1", "--batch-size", "8",
        "--eta", "2", "--steps", "2", "--set", "cluster.kv_tokens=200000", "--quiet"]


def test_grid_table_equals_direct_runs(small_trace, small, tmp_path, capsys):
    out, png = tmp_path / "sweep.parquet", tmp_path / "sweep.png"
    assert main(["--trace", str(small_trace), *BASE, "--grid", "cluster.instances=4,8", "--policy", "sync",
                 "--policy", "dora", "--jobs", "2", "--out", str(out), "--plot", str(png)]) == 0
    tab = pd.read_parquet(out)
    assert len(tab) == 4
    assert list(zip(tab["cluster.instances"], tab["policy"])) == [(4, "sync"), (4, "dora"), (8, "sync"), (8, "dora")]
    for col in (*METRIC_NAMES, "policy", "cluster.instances", "speedup_vs_sync", "scaling_efficiency",
                "bound_samples_per_s", "instances", "eta", "batch_size", "target_steps", "trainer_devices",
                "devices_per_instance", "max_seqs", "seed", "dispatches"):
        assert col in tab.columns, col
    assert (tab["eta"] == 2).all() and (tab["target_steps"] == 2).all() and (tab["trainer_devices"] == 4).all()
    for _, r in tab.iterrows():
        cfg = small_config(small_trace, steps=2, **{"cluster.instances": int(r["cluster.instances"])})
        d = simulate(small, cfg, r["policy"], progress=False)
        for k, v in d.metrics.items():
            if k != "sim_wall_s":
                assert r[k] == pytest.approx(v, rel=1e-12, nan_ok=True), k
        assert r["dispatches"] == (d.events["event"].astype(str) == "dispatch").sum()
    e = tab.set_index(["cluster.instances", "policy"])["e2e_samples_per_s"]
    for n in (4, 8):
        assert tab.set_index(["cluster.instances", "policy"]).loc[(n, "dora"), "speedup_vs_sync"] == pytest.approx(
            e[(n, "dora")] / e[(n, "sync")])
    eff = tab.set_index(["cluster.instances", "policy"])["scaling_efficiency"]
    assert eff[(4, "dora")] == pytest.approx(1.0)
    assert eff[(8, "dora")] == pytest.approx((e[(8, "dora")] / 8) / (e[(4, "dora")] / 4))
    assert png.is_file() and png.stat().st_size > 0
    assert read_sweep(out)["policy"].tolist() == tab["policy"].tolist()


def test_linked_keys_and_csv(small_trace, tmp_path):
    out = tmp_path / "sweep.csv"
    assert main(["--trace", str(small_trace), *BASE, "--grid", "cluster.instances,cluster.trainer_devices=4:2,8:4",
                 "--grid", "policy.eta=1,2", "--policy", "dora", "--jobs", "1", "--out", str(out)]) == 0
    tab = pd.read_csv(out)
    assert len(tab) == 4  # 2 linked points x 2 eta x 1 policy
    assert list(zip(tab["cluster.instances"], tab["cluster.trainer_devices"], tab["policy.eta"])) == [
        (4, 2, 1), (4, 2, 2), (8, 4, 1), (8, 4, 2)]
    assert (tab["trainer_devices"] == tab["cluster.trainer_devices"]).all()
    assert (tab["eta"] == tab["policy.eta"]).all()
    assert tab["speedup_vs_sync"].isna().all()  # sync did not run
    # efficiency is relative to the smallest instance count at the same eta
    assert tab.loc[tab["cluster.instances"] == 4, "scaling_efficiency"].tolist() == pytest.approx([1.0, 1.0])


def test_a_policy_section_key_is_a_grid_axis(small_trace, tmp_path):
    out = tmp_path / "sweep.csv"
    assert main(["--trace", str(small_trace), *BASE, "--grid", "policy.laminar.repack=true,false",
                 "--policy", "laminar", "--jobs", "1", "--out", str(out)]) == 0
    tab = pd.read_csv(out)
    assert tab["policy.laminar.repack"].tolist() == [True, False]
    assert tab.loc[0, "migrations"] > 0 and tab.loc[1, "migrations"] == 0  # repack moves; without it nothing does


def test_trace_param_axis_generates_and_reuses(small_trace, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "tail.parquet"
    argv = ["--trace", str(small_trace), *BASE, "--instances", "8", "--trace-param", "tail_alpha=1.1,3",
            "--policy", "sync", "--trace-cache", str(cache), "--jobs", "1", "--out", str(out)]
    assert main(argv) == 0
    files = sorted(cache.glob("*.parquet"))
    assert len(files) == 2
    tab = pd.read_parquet(out)
    assert tab["tail_alpha"].tolist() == [1.1, 3]
    for _, r in tab.iterrows():
        t = load_trace(r["trace"])
        assert t.metadata["params"]["tail_alpha"] == r["tail_alpha"]
        assert t.metadata["params"]["prompts_per_step"] == 64  # the rest comes from the --trace file's params
    assert load_trace(files[0]).response_len.sum() != load_trace(files[1]).response_len.sum()
    mtimes = [f.stat().st_mtime_ns for f in files]
    assert main(argv) == 0
    assert [f.stat().st_mtime_ns for f in files] == mtimes  # reused, not regenerated


@pytest.mark.parametrize("bad, needle", [
    (["--grid", "cluster.instancez=4,8"], "instancez"),
    (["--grid", "cluster=4"], "section"),
    (["--grid", "policy.laminar.repak=true,false"], "repak"),
    (["--grid", "policy.laminar=1"], "section"),
    (["--grid", "cluster.instances=0,8"], "instances"),
    (["--grid", "cluster.instances=four"], "integer"),
    (["--grid", "cluster.instances="], "empty value"),
    (["--grid", "cluster.instances,cluster.trainer_devices=4:2,8"], "linked"),
    (["--grid", "policy.eta=1", "--policy", "nope"], "nope"),
    ([], "empty grid"),
    (["--trace-param", "tail_alpha=0"], "tail_alpha"),
    (["--grid", "policy.batch_size=100000"], "batch_size"),
])
def test_bad_input_exits_2_and_writes_nothing(small_trace, tmp_path, capsys, bad, needle):
    out = tmp_path / "s.parquet"
    with pytest.raises(SystemExit) as e:
        main(["--trace", str(small_trace), *BASE, *bad, "--trace-cache", str(tmp_path / "c"), "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert list(tmp_path.iterdir()) == []


def test_cli_dispatches_sweep(small_trace, tmp_path):
    out = tmp_path / "s.txt"
    r = subprocess.run([sys.executable, "-m", "dora.sim", "sweep", "--trace", str(small_trace), "--grid",
                        "policy.eta=1,2", "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "--out" in r.stderr and ".parquet" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()
