"""The long-tail generator and the shipped traces follow their stated shape."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dora.trace import load_trace
from dora.trace.generate import PRESETS, TraceParams, generate
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
    assert params == {**PRESETS[name].__dict__}  # the file is what the preset generates
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
