"""The long-tail generator and the shipped traces follow their stated shape."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dora.config import build
from dora.trace import load_trace
from dora.trace.generate import FAMILY_FIELDS, PRESETS, TraceParams, generate, generate_to
from dora.trace.stats import trace_stats
from tests.conftest import REPO

SHIPPED = ["moe_longtail", "dense_math", "code_agentic"]


def test_deterministic_for_seed():
    p = TraceParams(steps=2, prompts_per_step=16, group_size=4, seed=3)
    a, b = generate(p), generate(p)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = generate(TraceParams(steps=2, prompts_per_step=16, group_size=4, seed=4))
    assert not np.array_equal(a["response_len"], c["response_len"])


def test_shape_of_lengths():
    p = TraceParams(steps=16, prompts_per_step=256, group_size=8, median=1000, max_len=16384, drift=0.5,
                    rho=0.6, seed=1)
    cols = generate(p)
    L = cols["response_len"]
    assert L.min() >= 1 and L.max() == p.max_len  # capped, and the cap is reached
    trunc = cols["finish_reason"] == "length"
    assert np.array_equal(trunc, L == p.max_len) and 0 < trunc.mean() < 0.05
    steps = cols["step"]
    assert np.median(L[steps == 15]) > 1.3 * np.median(L[steps == 0])  # upward drift
    x = np.log(L.astype(float)).reshape(-1, 8)
    within = x.var(axis=1, ddof=1).mean()
    assert x.mean(axis=1).var() > 0.3 * within  # lengths within a group are correlated


def test_tail_is_heavier_than_lognormal_body():
    body = generate(TraceParams(steps=4, prompts_per_step=512, group_size=8, tail_prob=0.0, seed=2))
    tail = generate(TraceParams(steps=4, prompts_per_step=512, group_size=8, tail_prob=0.05, seed=2))
    r = lambda c: np.percentile(c["response_len"], 99) / np.median(c["response_len"])  # noqa: E731
    assert r(tail) > 1.5 * r(body)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_trace_matches_its_preset(name):
    tr = load_trace(REPO / "traces" / f"{name}.parquet")
    params = tr.metadata["params"]
    assert tr.metadata["generator"].startswith("dora.trace.generate")
    assert params == PRESETS[name].record()  # the file is what the preset generates
    assert build(TraceParams, params) == PRESETS[name]  # (fields at their defaults are not recorded)
    assert params["steps"] * params["prompts_per_step"] * params["group_size"] == len(tr) >= 64 * 512 * 16
    st = trace_stats(tr)
    if name == "moe_longtail":
        assert tr.max_len >= 32768 and 8 <= st["p99_over_p50"] <= 12
        assert params["moe_imbalance_cv"] > 0


def test_shipped_traces_are_small():
    total = sum((REPO / "traces" / f"{n}.parquet").stat().st_size for n in SHIPPED)
    assert total < 20 * 2**20


def test_stats_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dora.trace", "stats", "--json",
                          str(REPO / "traces" / "dense_math.parquet")], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)[str(REPO / "traces" / "dense_math.parquet")]
    for k in ("p50", "p90", "p99", "max", "top10_token_share", "truncated_share"):
        assert k in st
    assert st["p50"] < st["p90"] < st["p99"] <= st["max"]


def test_generate_cli_and_bad_param(tmp_path):
    p = tmp_path / "g.parquet"
    ok = subprocess.run([sys.executable, "-m", "dora.trace", "generate", "--preset", "dense_math", "--steps", "2",
                         "--prompts-per-step", "8", "--out", str(p)], capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert "p99" in ok.stdout and load_trace(p).num_groups == 16
    bad = subprocess.run([sys.executable, "-m", "dora.trace", "generate", "--sigma", "-1", "--out",
                          str(tmp_path / "b.parquet")], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "sigma" in bad.stderr
    assert not (tmp_path / "b.parquet").exists()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_trace_is_reproducible_from_its_preset(name):
    tr = load_trace(REPO / "traces" / f"{name}.parquet")
    cols = generate(PRESETS[name])
    assert np.array_equal(cols["response_len"], tr.response_len)
    assert np.array_equal(cols["prompt_len"], tr.prompt_len)


# ---- robustness-grid families and presets ---------------------------------------------------------

GRID = ["heavy_tail", "light_tail", "bimodal", "agentic_tools", "drift_up", "short_uniform"]
SMALL = {"steps": 8, "prompts_per_step": 128}  # each preset's shape on fewer rows


def _small(name: str) -> dict:
    return generate(TraceParams(**{**PRESETS[name].__dict__, **SMALL}))


def test_families_off_change_nothing():
    """Switched off (their defaults), the families leave a trace as it was: same columns, values
    and recorded parameters; switched on, the base draws stay the same."""
    base = TraceParams(steps=2, prompts_per_step=32, group_size=4, seed=5)
    assert set(base.record()) == {f for f in base.__dict__} - set(FAMILY_FIELDS)
    a = generate(base)
    assert "turns" not in a
    on = generate(TraceParams(**{**base.__dict__, "turns_mean": 3.0, "tool_wait_s_median": 1.0}))
    assert np.array_equal(on["response_len"], a["response_len"]) and np.array_equal(on["prompt_len"], a["prompt_len"])


def test_bimodal_has_two_modes():
    cols = _small("bimodal")
    x = np.log(cols["response_len"].astype(float))
    p = PRESETS["bimodal"]
    short = x < (np.log(p.median) + np.log(p.mix_median)) / 2
    assert 0.25 < short.mean() < 0.45  # about mix_share of the samples in the short mode
    assert np.median(cols["response_len"][short]) < 1.5 * p.mix_median
    assert np.median(cols["response_len"][~short]) > 0.7 * p.median
    hist, _ = np.histogram(x, bins=24)
    peaks = [i for i in range(1, 23) if hist[i] > hist[i - 1] and hist[i] >= hist[i + 1]]
    assert len(peaks) >= 2


def test_agentic_tools_columns():
    cols = _small("agentic_tools")
    p = PRESETS["agentic_tools"]
    turns, wait, tool = cols["turns"], cols["tool_wait_s"], cols["tool_tokens"]
    assert turns.dtype == np.int32 and turns.min() >= 1 and (turns <= cols["response_len"]).all()
    assert turns.mean() == pytest.approx(p.turns_mean, rel=0.05)
    assert 4 <= np.percentile(turns, 25) and np.percentile(turns, 75) <= 8
    multi = turns > 1
    assert (wait[~multi] == 0).all() and (tool[~multi] == 0).all()
    assert np.median(wait[multi]) == pytest.approx(p.tool_wait_s_median, rel=0.1)
    assert np.percentile(wait[multi], 90) > 10  # tens of seconds in the tail
    assert np.median(tool[multi]) == pytest.approx(p.tool_tokens_median, rel=0.1) and tool.max() <= p.prompt_max
    # longer trajectories make more turns
    assert np.corrcoef(np.log(cols["response_len"]), turns)[0, 1] > 0.2


def test_grid_presets_have_their_shape():
    st = {}
    for name in GRID:
        L = _small(name)["response_len"].astype(float)
        p50, p99 = np.percentile(L, [50, 99])
        st[name] = p99 / p50
    assert st["heavy_tail"] > 12 and st["light_tail"] < 4 and st["short_uniform"] < 1.6
    assert st["heavy_tail"] > st["bimodal"] > st["light_tail"] > st["short_uniform"]
    su = _small("short_uniform")["response_len"]
    assert su.max() <= PRESETS["short_uniform"].max_len and abs(np.median(su) - 400) < 20
    d = _small("drift_up")
    first, last = d["step"] == 0, d["step"] == SMALL["steps"] - 1
    assert np.median(d["response_len"][last]) > 2.0 * np.median(d["response_len"][first])


@pytest.mark.parametrize("name", GRID)
def test_grid_preset_cli(tmp_path, name):
    p = tmp_path / f"{name}.parquet"
    ok = subprocess.run([sys.executable, "-m", "dora.trace", "generate", "--preset", name, "--steps", "2",
                         "--prompts-per-step", "8", "--out", str(p)], capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    tr = load_trace(p)
    assert tr.num_groups == 16 and tr.metadata["params"]["name"] == name
    assert (tr.turns is not None) == (name == "agentic_tools")
    if name == "agentic_tools":
        assert "turns mean" in ok.stdout
        assert trace_stats(tr)["turns_mean"] > 2


@pytest.mark.parametrize("param, value, word", [("turns_mean", "0.5", "turns_mean"), ("mix_share", "1.5", "mix_share"),
                                                ("tool_wait_sigma", "-1", "tool_wait_sigma")])
def test_family_bad_params(tmp_path, param, value, word):
    bad = subprocess.run([sys.executable, "-m", "dora.trace", "generate", f"--{param.replace('_', '-')}", value,
                          "--out", str(tmp_path / "b.parquet")], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and word in bad.stderr


def test_mix_share_needs_a_median():
    with pytest.raises(Exception, match="mix_median"):
        generate(TraceParams(steps=2, prompts_per_step=4, mix_share=0.3))


def test_record_round_trips(tmp_path):
    p = tmp_path / "a.parquet"
    params = TraceParams(**{**PRESETS["agentic_tools"].__dict__, "steps": 2, "prompts_per_step": 4})
    generate_to(str(p), params)
    assert build(TraceParams, load_trace(p).metadata["params"]) == params
