"""Hypothesis strategies for the scheduler property tests: small in-memory traces and
simulator configs (cluster shape, η, B, G, policy knobs, failure times)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from dora.config import build
from dora.sim.config import SimConfig
from dora.trace import Trace

LENGTH_SHAPES = ("random", "equal", "outlier", "ones", "cap")


def make_trace(lengths: np.ndarray, prompt_lens: np.ndarray, cap: int, shape: str,
               turns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> Trace:
    """A validated-shape Trace from a (groups x G) array of response lengths (rows sorted by
    prompt_id, sample_idx; groups contiguous), as dora.trace.load_trace would return it; `turns`:
    (turns, tool_wait_s, tool_tokens) of the same shape, for multi-turn trajectories."""
    n, g = lengths.shape
    multi = {} if turns is None else {
        "turns": turns[0].reshape(-1).astype(np.int32), "tool_wait_s": turns[1].reshape(-1).astype(np.float64),
        "tool_tokens": turns[2].reshape(-1).astype(np.int32)}
    return Trace(
        path=f"<hypothesis {shape} {n}x{g} cap {cap}>",
        prompt_id=np.repeat(np.arange(n, dtype=np.int64), g),
        sample_idx=np.tile(np.arange(g, dtype=np.int32), n),
        prompt_len=np.repeat(prompt_lens.astype(np.int32), g),
        response_len=lengths.reshape(-1).astype(np.int32),
        metadata={"generator": "tests.sched.strategies", "params": {"max_len": cap}},
        **multi,
    )


@st.composite
def traces(draw, min_groups: int = 1, multi_turn: bool = False) -> Trace:
    """Small traces, including degenerate ones: all lengths equal, one extreme outlier,
    every length 1, every length at the cap. multi_turn: trajectories of 1 to 6 turns (at most
    their length), with tool calls of 0 to 5 s appending 0 to 64 tokens each."""
    g = draw(st.integers(1, 4))
    n = draw(st.integers(max(min_groups, 1), max(min_groups, 1) + 12))
    cap = draw(st.sampled_from([1, 2, 16, 128, 512, 2048]))
    shape = draw(st.sampled_from(LENGTH_SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if shape == "random":
        body = np.exp(rng.normal(np.log(max(cap / 8, 1)), 1.0, (n, g)))
        lengths = np.clip(np.rint(body), 1, cap)
    elif shape == "equal":
        lengths = np.full((n, g), draw(st.integers(1, cap)))
    elif shape == "outlier":
        lengths = np.full((n, g), draw(st.integers(1, max(cap // 64, 1))))
        lengths[rng.integers(n), rng.integers(g)] = cap
    elif shape == "ones":
        lengths = np.ones((n, g))
    else:
        lengths = np.full((n, g), cap)
    prompt_lens = rng.integers(1, draw(st.sampled_from([1, 8, 64])) + 1, n)
    turns = None
    if multi_turn:
        k = np.minimum(rng.integers(1, draw(st.integers(1, 6)) + 1, (n, g)), lengths)
        waits = rng.choice(np.array([draw(st.sampled_from([0.0, 0.01, 0.5])), draw(st.sampled_from([0.1, 5.0]))]),
                           (n, g))
        tool = rng.integers(0, draw(st.sampled_from([1, 8, 64])) + 1, (n, g))
        turns = (k, waits, tool)
        shape += " multi-turn"
    return make_trace(lengths.astype(np.int64), prompt_lens, cap, shape, turns)


@dataclass
class Case:
    """One generated scenario: a trace and the SimConfig mapping to build for it."""

    trace: Trace
    data: dict

    def config(self) -> SimConfig:
        return build(SimConfig, self.data)

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: enough to rebuild it
        t = self.trace
        return (f"Case(trace={t.path!r}, response_len={t.response_len.tolist()}, "
                f"prompt_len={t.prompt_len[:: t.group_size].tolist()}, data={self.data!r})")


def _trainer_devices(draw) -> dict:
    """dora's elastic trainer (it lends its devices; the simulator then lends nothing to it) and
    lending (it borrows rollout ones), each on or off."""
    return {"elastic_trainer": draw(st.booleans()), "lend_trainer": draw(st.booleans())}


def _policy_knobs(draw, policy: str) -> dict:
    if policy == "sync":
        return {"sync": {"colocated": draw(st.booleans())}}
    if policy == "partial":
        return {"partial": {"max_concurrent_groups": draw(st.integers(0, 6))}}
    if policy == "laminar":
        return {"laminar": {"repack": draw(st.booleans()), "repack_kv": draw(st.booleans()),
                            "repack_occupancy": draw(st.sampled_from([0.1, 0.25, 1.0])),
                            "repack_interval_s": draw(st.sampled_from([0.5, 5.0])),
                            "repack_kv_fill": draw(st.sampled_from([0.5, 1.0])),
                            "repack_batch": draw(st.sampled_from([0, 2, 64]))}}
    if policy == "dora":
        return {"dora": {"versions_per_instance": draw(st.integers(1, 3)),
                         "migrate_kv": draw(st.booleans()),
                         "spread_tails": draw(st.booleans()), "host_max": draw(st.sampled_from([1, 2, 8, 64])),
                         "consolidate": draw(st.booleans()),
                         "balance": draw(st.sampled_from(["slots", "predicted"])),
                         "repartition_load": draw(st.sampled_from([0.0, 0.5, 1.0])),
                         "predictor": draw(st.sampled_from(["history", "none"])),
                         "max_regenerations": draw(st.integers(0, 2)),
                         "widen_max": draw(st.sampled_from([1.0, 1.5, 3.0])), "cohort_check": draw(st.booleans()),
                         "tool_calls": draw(st.booleans()), **_trainer_devices(draw)}}
    return {}


@st.composite
def cases(draw, policy: str, multi_turn: bool = False) -> Case:
    """A trace and a small cluster/policy config that fits it (KV holds the longest trajectory)."""
    batch = draw(st.integers(1, 4))
    trace = draw(traces(min_groups=batch, multi_turn=multi_turn))
    need = int(trace.prompt_len.max()) + int(trace.response_len.max()) + int(trace.tool_tokens_total().max())
    eta = draw(st.integers(1 if policy == "one_step" else 0, 4))
    instances = draw(st.integers(1, 8))
    min_seqs = -(-trace.group_size // instances)  # the cluster holds one group at once (check_fits)
    data = {
        "trace": trace.path,
        "policies": [policy],
        "steps": draw(st.integers(2, 4)),
        "seed": draw(st.integers(0, 3)),
        "cluster": {"instances": instances, "devices_per_instance": draw(st.integers(1, 2)),
                    "max_seqs": draw(st.integers(min_seqs, 16)),
                    "kv_tokens": max(2, need * draw(st.sampled_from([1, 2, 100]))),
                    "trainer_devices": draw(st.integers(1, 8))},
        "cost": {"moe_imbalance_cv": draw(st.sampled_from([0.0, 0.3])),
                 "trainer_resize_s": draw(st.sampled_from([0.0, 1.0, 31.22]))},
        "policy": {"eta": eta, "batch_size": batch,
                   "group_size": draw(st.sampled_from([0, trace.group_size])), **_policy_knobs(draw, policy)},
    }
    return Case(trace, data)


@st.composite
def fault_specs(draw, instances: int, horizon_s: float = 60.0) -> dict:
    """A FaultConfig mapping (dora/sim/faults.py): explicit instance failures [[time_s, instance], ...]
    on the configured rollout instances, sometimes drawn ones (MTBF), a repair delay, stragglers,
    failed weight loads, trainer crashes."""
    times = st.floats(0.0, horizon_s, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 3))
    fail_at = draw(st.lists(st.tuples(times, st.integers(0, instances - 1)).map(list), min_size=1, max_size=4))
    return {"fail_at": fail_at,
            "repair_s": draw(st.sampled_from([0.01, 0.5, 5.0, 30.0])),
            "mtbf_s": draw(st.sampled_from([0.0, 0.0, 300.0, 3000.0])),  # >> a batch: progress possible
            "straggler_fraction": draw(st.sampled_from([0.0, 0.5])),
            "straggler_slowdown": draw(st.sampled_from([1.0, 4.0])),
            "load_fail_prob": draw(st.sampled_from([0.0, 0.0, 0.3])),
            "trainer_restart_at": draw(st.lists(times, max_size=2)),
            "trainer_restart_s": draw(st.sampled_from([0.5, 10.0]))}
