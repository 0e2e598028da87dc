"""Shared fixtures: small traces written to tmp dirs, small simulator configs."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from dora.config import build
from dora.sim.config import SimConfig
from dora.sim.run import simulate
from dora.trace import load_trace, write_trace
from dora.trace.generate import TraceParams, generate_to
from tests.event_logs import POLICIES

REPO = Path(__file__).resolve().parents[1]


def load_benchmark(name: str, module: str = "", register: bool = False):
    """The script benchmarks/<name>.py as a module named `module` (default `name`; `register`: also
    in sys.modules, for a script whose dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(module or name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[module or name] = mod
    spec.loader.exec_module(mod)
    return mod

# Hypothesis profiles (tests that set max_examples themselves keep theirs): `dora` is the default
# run's size; `full` is the property suite's acceptance run (>= 500 cases per policy):
#   DORA_HYPOTHESIS_PROFILE=full python -m pytest tests/sched/test_properties.py
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("dora", max_examples=20, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("full", max_examples=500, deadline=None, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("DORA_HYPOTHESIS_PROFILE", "dora"))


def write_lengths(path: Path, lengths: list[list[int]], prompt_len: int | list[int] = 10,
                  turns: list[list[int]] | None = None, tool_wait_s: float | list[list[float]] = 0.0,
                  tool_tokens: int | list[list[int]] = 0) -> Path:
    """A trace with one group per inner list (responses of that group's samples); with `turns`
    (same shape) also the multi-turn columns (a scalar tool_wait_s / tool_tokens: every row's)."""
    g = len(lengths[0])
    n = len(lengths)
    plen = [prompt_len] * n if isinstance(prompt_len, int) else prompt_len
    cols = {
        "prompt_id": np.repeat(np.arange(n, dtype=np.int64), g),
        "sample_idx": np.tile(np.arange(g, dtype=np.int32), n),
        "prompt_len": np.repeat(np.asarray(plen, dtype=np.int32), g),
        "response_len": np.asarray(lengths, dtype=np.int32).reshape(-1),
    }
    if turns is not None:
        cols["turns"] = np.asarray(turns, dtype=np.int32).reshape(-1)
        cols["tool_wait_s"] = np.broadcast_to(np.asarray(tool_wait_s, dtype=np.float64), (n, g)).reshape(-1)
        cols["tool_tokens"] = np.broadcast_to(np.asarray(tool_tokens, dtype=np.int32), (n, g)).reshape(-1)
    write_trace(path, cols, {"generator": "tests"})
    return path


@pytest.fixture(scope="session")
def small_trace(tmp_path_factory) -> Path:
    """A long-tail trace of 8 steps x 64 prompts x 8 samples with a 4K cap (fast to simulate)."""
    p = tmp_path_factory.mktemp("traces") / "small.parquet"
    generate_to(str(p), TraceParams(name="small", steps=8, prompts_per_step=64, group_size=8, median=300,
                                    sigma=0.8, tail_prob=0.05, tail_start=3.0, tail_alpha=1.4, max_len=4096,
                                    prompt_median=100, prompt_max=512, moe_imbalance_cv=0.1, seed=7))
    return p


@pytest.fixture(scope="session")
def agentic_trace(tmp_path_factory) -> Path:
    """small_trace's shape with multi-turn trajectories: 1 + Poisson(2) turns, tool calls of
    median 2 s appending ~40 tokens each."""
    p = tmp_path_factory.mktemp("traces") / "small_agentic.parquet"
    generate_to(str(p), TraceParams(name="small_agentic", steps=8, prompts_per_step=64, group_size=8, median=300,
                                    sigma=0.8, tail_prob=0.05, tail_start=3.0, tail_alpha=1.4, max_len=4096,
                                    prompt_median=100, prompt_max=512, moe_imbalance_cv=0.1, seed=11,
                                    turns_mean=3.0, tool_wait_s_median=2.0, tool_wait_sigma=0.8,
                                    tool_tokens_median=40, tool_tokens_sigma=0.5))
    return p


def small_config(trace: Path, **over) -> SimConfig:
    """8 instances x 16 slots, B=8 groups, eta=2, 6 steps on `trace`; `over` as dotted keys."""
    data: dict = {"trace": str(trace), "steps": 6, "cluster": {"instances": 8, "devices_per_instance": 1,
                                                               "max_seqs": 16, "kv_tokens": 200_000,
                                                               "trainer_devices": 4},
                  "policy": {"eta": 2, "batch_size": 8}}
    for key, value in over.items():
        node = data
        parts = key.split(".")
        for k in parts[:-1]:
            node = node.setdefault(k, {})
        node[parts[-1]] = value
    return build(SimConfig, data)


def small_plot_config(trace: Path, instances: int = 4, **over) -> SimConfig:
    """small_config with 4 instances (or `instances`), B = 4 and 4 steps (and `over`): the runs the
    analysis and plot tests read."""
    return small_config(trace, **{"steps": 4, "cluster.instances": instances, "policy.batch_size": 4, **over})


@pytest.fixture(scope="session")
def small(small_trace):
    return load_trace(small_trace)


@pytest.fixture(scope="session")
def small_trace_path(small_trace) -> str:
    return str(small_trace)


@pytest.fixture(scope="session")
def policy_runs(small_trace, small):
    """sync, partial and dora (tests/event_logs.py) on small_trace under small_plot_config."""
    cfg = small_plot_config(small_trace)
    return {name: simulate(small, cfg, name, progress=False) for name in POLICIES}


@pytest.fixture(scope="session")
def policy_logs(policy_runs):
    return {name: r.events for name, r in policy_runs.items()}


@pytest.fixture(scope="session")
def agentic_logs(agentic_trace):
    """sync and dora on agentic_trace (multi-turn, tool calls), the same cluster as policy_runs."""
    cfg = small_plot_config(agentic_trace)
    trace = load_trace(agentic_trace)
    return {name: simulate(trace, cfg, name, progress=False).events for name in ("sync", "dora")}


# under CI=true a skip for a missing executor dependency is a failure (tests/ci_skips.py)
from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401


def pytest_terminal_summary(terminalreporter):
    """The fuzzer's seed, when it ran (tests/test_fuzz.py)."""
    import sys

    fuzz = sys.modules.get("tests.test_fuzz")
    if fuzz is not None:
        terminalreporter.write_line(f"tests/test_fuzz.py seed: DORA_FUZZ_SEED={fuzz.SEED}")
