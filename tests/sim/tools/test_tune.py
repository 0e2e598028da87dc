"""`python -m dora.sim tune`: searches dora's knobs, keeps C1-C3, writes a policy config dora.exec loads."""

from __future__ import annotations

import yaml

from dora.sim.tools.tune import candidates, choose, main
from tests.conftest import small_config

SMALL = ["--instances", "8", "--max-seqs", "16", "--trainer-devices", "4", "--devices-per-instance", "1",
         "--batch-size", "8", "--eta", "2", "--steps", "4", "--quiet", "--set", "cluster.kv_tokens=200000"]


def test_candidates_start_with_the_base_and_stay_in_bounds(small_trace):
    base = small_config(small_trace)
    cands = candidates(base, 20, eta_max=3, vpi_max=2, seed=1)
    assert cands[0]["eta"] == base.policy.eta and cands[0]["consolidate"] == base.policy.dora.consolidate
    assert len(cands) == 21 and len({tuple(sorted(c.items())) for c in cands}) == 21
    assert all(0 <= c["eta"] <= 3 and 1 <= c["versions_per_instance"] <= 2 for c in cands)
    assert cands[0]["host_max"] == base.policy.dora.host_max
    assert {c["host_max"] for c in cands[1:]} <= {1, 2, 4, 8} and len({c["host_max"] for c in cands}) > 1
    assert candidates(base, 20, 3, 2, seed=1) == cands  # seeded


def test_choose_keeps_the_base_inside_min_gain():
    rows = [{"base": False, "admissible": True, "e2e_samples_per_s": 10.3},
            {"base": True, "admissible": True, "e2e_samples_per_s": 10.0}]
    assert choose(rows, 0.05)["base"]
    assert not choose(rows, 0.01)["base"]


def test_cli_writes_a_policy_config_the_executor_loads(small_trace, tmp_path, capsys):
    out, csv = tmp_path / "tuned.yaml", tmp_path / "t.csv"
    assert main(["--trace", str(small_trace), *SMALL, "--budget", "6", "--eta-max", "3", "--min-gain", "0",
                 "--out", str(out), "--csv", str(csv)]) == 0
    assert "samples/s" in capsys.readouterr().out
    import pandas as pd

    rows = pd.read_csv(csv)
    assert len(rows) == 7 and rows["base"].sum() == 1
    best = rows[rows["admissible"]].sort_values("e2e_samples_per_s", ascending=False).iloc[0]
    data = yaml.safe_load(out.read_text())
    assert data["policy"]["eta"] == best["eta"] <= 3
    assert data["policy"]["dora"]["spread_tails"] == best["spread_tails"]
    assert data["policy"]["dora"]["host_max"] == best["host_max"]
    assert rows["e2e_samples_per_s"].max() >= rows[rows["base"]]["e2e_samples_per_s"].iloc[0]
    from dora.exec.__main__ import parser as exec_parser
    from dora.exec.__main__ import resolve_config

    cfg = resolve_config(exec_parser().parse_args(["--model", "m", "--policy-config", str(out)]))
    assert cfg.policy.eta == data["policy"]["eta"]
    assert cfg.policy.dora.repartition_load == data["policy"]["dora"]["repartition_load"]


def test_refuses_other_policies(small_trace, capsys):
    import pytest

    with pytest.raises(SystemExit) as e:
        main(["--trace", str(small_trace), *SMALL, "--policy", "sync"])
    assert e.value.code == 2
