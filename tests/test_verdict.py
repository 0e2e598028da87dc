"""The verdict line: hand-made runs with known metrics."""

from __future__ import annotations

import math

from dora.verdict import Sensitivity, broken, ranked, verdict


def run(policy: str, rate: float, c1: int = 0, c3: int = 0, lost: int = 0) -> dict:
    return {"policy": policy, "metrics": {"e2e_samples_per_s": rate, "c1_violations": c1, "c2_lost": lost,
                                          "c2_duplicated": 0, "c3_violations": c3}}


RUNS = [run("sync", 4.0), run("partial", 12.0, c1=100), run("laminar", 9.0), run("dora", 18.0)]


def test_broken_names_each_contract_once():
    assert broken(run("x", 1.0)["metrics"]) == []
    assert broken(run("x", 1.0, c1=3, c3=1, lost=2)["metrics"]) == ["C1", "C2", "C3"]


def test_ranked_leaves_out_contract_breakers_fastest_first():
    assert [r["policy"] for r in ranked(RUNS)] == ["dora", "laminar", "sync"]


def test_winner_margin_and_unranked():
    v = verdict(RUNS)
    assert (v.winner, v.runner_up) == ("dora", "laminar")
    assert v.margin == 2.0  # 18 / 9
    assert v.unranked == [("partial", ["C1"], 12.0)]
    line = v.line()
    assert line.startswith("verdict: dora is the fastest policy that keeps C1-C3 (18.000 samples/s), 2.00x the next, "
                           "laminar (9.000)")
    assert "partial breaks C1 and is not ranked" in line and "faster" not in line


def test_a_faster_breaker_is_said_to_be_faster():
    v = verdict([run("sync", 4.0), run("partial", 12.0, c1=5)])
    assert v.winner == "sync" and v.runner_up is None and math.isnan(v.margin)
    assert "sync is the only policy run that keeps C1-C3" in v.line()
    assert "partial breaks C1 and is not ranked, faster at 12.000 samples/s" in v.line()


def test_no_policy_kept_the_contracts():
    v = verdict([run("partial", 12.0, c1=5)])
    assert v.winner is None and v.line().startswith("verdict: no policy kept C1-C3")


def test_sensitivity_is_reported():
    v = verdict(RUNS, Sensitivity(6, 6, 0.2))
    assert "the winner holds under all 6 cost perturbations of +/-20%" in v.line()
    v = verdict(RUNS, Sensitivity(5, 6, 0.2, [("training x1.2", "laminar")]))
    assert "holds under 5 of 6 cost perturbations of +/-20% (not under training x1.2: laminar)" in v.line()
    d = v.to_dict()
    assert d["winner"] == "dora" and d["sensitivity"]["kept"] == 5 and d["unranked"][0]["breaks"] == ["C1"]
