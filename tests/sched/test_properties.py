"""Property tests: every policy, driven by the simulator on random small traces and clusters,
keeps C1 (except partial), C2, C3, leaves no trajectory unaccounted for, and logs in time order.

Case counts come from the hypothesis profile (tests/conftest.py): `dora` (the default) is small,
the whole file in well under a minute; DORA_HYPOTHESIS_PROFILE=full runs 500 cases per test and
policy (the counts: add --hypothesis-show-statistics):
    DORA_HYPOTHESIS_PROFILE=full python -m pytest tests/sched/test_properties.py --hypothesis-show-statistics
Failures are not shrunk (DORA_SHRINK=1 shrinks them). Cases never use wall time; a run that
delivers over MAX_SCHEDULER_EVENTS events to its policy fails as making no progress (failures and
recoveries can keep a stuck run's clock going forever).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from dora.eventlog import SEGMENT_END, SEGMENT_START
from dora.sched.registry import names as policy_names
from dora.sched.registry import POLICIES
from dora.sim.run import simulate
from tests.sched import strategies as S

HELD = ("end", "migrate_out", "interrupt")  # cut by the end of the run, in transit, awaiting a reload


def log_problems(df: pd.DataFrame) -> list[str]:
    """What is wrong with one run's event log (empty: nothing):
    - simulated time `t_s` never goes back in row order (rows are appended as the clock runs);
    - every trajectory's segments alternate start (dispatch/migrate_in/resume) and end
      (finish/abort/migrate_out/interrupt/lost/end), starting with its one dispatch, so none is
      left running without a closing row (an abort/lost row right after interrupt/migrate_out
      closes a trajectory that was off its instance: it has no segment of its own);
    - a trajectory whose last segment end is not terminal (cut by the end of the run, in transit,
      waiting for a reload) is listed in a `leftover` row (its group is still in flight) or its
      group was abandoned after that row (a `regenerate` row: e.g. its instance failed while it
      waited for the reload);
    - a finished trajectory is trained, or its group is still held at the end (leftover), or its
      group was abandoned after it finished (a `regenerate` row later in the log);
    - a trained trajectory is trained once, after its finish."""
    out: list[str] = []
    t = df["t_s"].to_numpy()
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        r = int(back[0])
        out.append(f"time goes back at row {r + 1}: {t[r]} -> {t[r + 1]} ({df['event'].iloc[r + 1]})")
    ev = df["event"].astype(str).to_numpy()
    rows = np.arange(len(df))
    seg = np.isin(ev, SEGMENT_START + SEGMENT_END)
    traj = df["trajectory"].to_numpy()
    pid = df["prompt_id"].to_numpy()
    left = set(traj[ev == "leftover"].tolist())
    left_groups = set(pid[ev == "leftover"].tolist())
    regen_last = pd.Series(rows[ev == "regenerate"]).groupby(pid[ev == "regenerate"]).max().to_dict()
    trained = pd.Series(rows[ev == "train"]).groupby(traj[ev == "train"]).agg(["size", "min"])
    for tid, idx in pd.Series(rows[seg]).groupby(traj[seg]):
        kinds = ev[idx.to_numpy()]
        # a trajectory off its instance (interrupted, in transit) that is aborted or lost gets a
        # closing row with no segment of its own: drop it before checking the alternation
        off = np.r_[False, np.isin(kinds[:-1], ("interrupt", "migrate_out"))] & np.isin(kinds, ("abort", "lost"))
        last_kind = kinds[-1]
        kinds = kinds[~off]
        starts = np.isin(kinds, SEGMENT_START)
        if kinds[0] != "dispatch" or (kinds == "dispatch").sum() != 1:
            out.append(f"trajectory {tid}: segments {list(kinds)} do not begin with one dispatch")
            continue
        if not (starts[0::2].all() and not starts[1::2].any()):
            out.append(f"trajectory {tid}: segments {list(kinds)} do not alternate start/end")
            continue
        last, end_row = last_kind, int(idx.iloc[-1])
        g = int(pid[end_row])
        abandoned = regen_last.get(g, -1) > end_row  # its group was given up (and sampled again) later
        if last in SEGMENT_START:
            out.append(f"trajectory {tid}: left running (last row {last}, no end, segments {list(kinds)})")
        elif last in HELD and tid not in left and not abandoned:
            out.append(f"trajectory {tid}: ends with {last} but is neither in a leftover row nor regenerated")
        elif last == "finish":
            if tid in trained.index:
                if int(trained.loc[tid, "min"]) < end_row:
                    out.append(f"trajectory {tid}: trained before it finished")
            elif g not in left_groups and not abandoned:
                out.append(f"trajectory {tid}: finished, never trained, group {g} neither held nor regenerated")
    if len(trained) and (trained["size"] > 1).any():
        out.append(f"trajectories trained twice: {trained.index[trained['size'] > 1].tolist()[:5]}")
    for tid in set(trained.index.tolist()) - set(traj[seg].tolist()):
        out.append(f"trajectory {tid}: trained but never generated")
    return out[:5]


MAX_SCHEDULER_EVENTS = 20_000  # a tiny case takes at most a few thousand; more means no progress


class NoProgress(AssertionError):
    pass


@contextmanager
def event_budget(policy: str, limit: int = MAX_SCHEDULER_EVENTS):
    """Fail (instead of running forever) when a run delivers more than `limit` events to the
    policy: a run that cannot progress while failures and recoveries keep coming never stalls."""
    cls = POLICIES[policy]
    orig = cls.handle
    count = [0]

    def handle(self, event, now):
        count[0] += 1
        if count[0] > limit:
            raise NoProgress(f"no progress: {limit} scheduler events, simulated t={now:.1f} s, "
                             f"trainer version {self.view.trainer_version}, last event {type(event).__name__}")
        return orig(self, event, now)

    cls.handle = handle
    try:
        yield
    finally:
        cls.handle = orig


def check_run(case: S.Case, policy: str) -> dict:
    """Simulate one case and assert every property; returns the metrics."""
    cfg = case.config()
    with event_budget(policy):
        r = simulate(case.trace, cfg, policy, progress=False)
    m = r.metrics
    assert m["steps"] == cfg.steps
    assert m["c2_lost"] == 0 and m["c2_duplicated"] == 0, (m["c2_lost"], m["c2_duplicated"])
    assert m["c3_violations"] == 0 and m["staleness_max"] <= cfg.policy.eta
    if policy != "partial":
        assert m["c1_violations"] == 0
    assert m["trained_samples"] == cfg.steps * cfg.policy.batch_size * case.trace.group_size
    assert log_problems(r.events) == []
    return m


# No shrinking: a failure is printed as drawn instead of re-running the simulator hundreds of
# times; DORA_SHRINK=1 shrinks it to a minimal case.
PHASES = list(Phase) if os.environ.get("DORA_SHRINK") else [Phase.explicit, Phase.reuse, Phase.generate]


@pytest.mark.parametrize("policy", policy_names())
@settings(phases=PHASES)
@given(data=st.data())
def test_policy_properties(policy, data):
    check_run(data.draw(S.cases(policy), label="case"), policy)


@pytest.mark.parametrize("policy", policy_names())
@settings(phases=PHASES)
@given(data=st.data())
def test_policy_properties_with_failures(policy, data):
    case = data.draw(S.cases(policy), label="case")
    case.data["faults"] = data.draw(S.fault_specs(case.data["cluster"]["instances"]), label="faults")
    check_run(case, policy)


@pytest.mark.parametrize("policy", policy_names())
@settings(phases=PHASES)
@given(data=st.data())
def test_policy_properties_multi_turn(policy, data):
    """Multi-turn trajectories (tool calls between turns, KV pinned meanwhile), with failures."""
    case = data.draw(S.cases(policy, multi_turn=True), label="case")
    if data.draw(st.booleans(), label="failures"):
        case.data["faults"] = data.draw(S.fault_specs(case.data["cluster"]["instances"]), label="faults")
    check_run(case, policy)


def test_log_checker_catches_a_running_trajectory():
    """The log checker is not vacuous: a dispatch with no closing row, a time reversal, a finished
    trajectory neither trained nor held are each reported."""
    base = dict(instance=0, version=0, trainer_version=-1, tokens=1, detail="", dur_s=0.0, busy_s=0.0,
                prefill_s=0.0)
    rows = [dict(t_s=0.0, event="dispatch", trajectory=0, prompt_id=0, **base),
            dict(t_s=1.0, event="finish", trajectory=0, prompt_id=0, **base),
            dict(t_s=0.5, event="dispatch", trajectory=1, prompt_id=1, **base)]
    problems = log_problems(pd.DataFrame(rows))
    assert any("time goes back" in p for p in problems)
    assert any("trajectory 1: left running" in p for p in problems)
    assert any("trajectory 0: finished, never trained" in p for p in problems)


# ---- regressions: minimal cases the search found (each failed before its fix) ---------------------


def _case(policy: str, lengths: list[list[int]], prompt_len: int, cluster: dict, policy_cfg: dict,
          steps: int, faults: dict | None = None) -> S.Case:
    trace = S.make_trace(np.asarray(lengths), np.full(len(lengths), prompt_len), int(np.max(lengths)), "repro")
    data = {"trace": trace.path, "policies": [policy], "steps": steps, "cost": {"moe_imbalance_cv": 0.0},
            "cluster": {"devices_per_instance": 1, "trainer_devices": 1, **cluster}, "policy": policy_cfg}
    if faults:
        data["faults"] = faults
    return S.Case(trace, data)


def test_repro_dora_stalls_with_tight_kv():
    """dora once stalled here: v2 was published while both instances loaded v1, and after the loads
    nothing was dispatched or loaded (3 complete groups of B=4 in the buffer)."""
    check_run(_case("dora", [[512] * 4] * 4, 1, {"instances": 2, "max_seqs": 7, "kv_tokens": 1026},
                    {"eta": 2, "batch_size": 4}, steps=3), "dora")


def test_repro_dora_c2_lost_eta0():
    """dora with eta 0 once regenerated a stale group on the version the trainer was training, leaving
    it complete but too old at the end (c2_lost 1)."""
    check_run(_case("dora", [[500] * 3] * 15, 5, {"instances": 7, "max_seqs": 11, "kv_tokens": 507},
                    {"eta": 0, "batch_size": 4}, steps=2), "dora")


@pytest.mark.parametrize("policy", policy_names())
def test_repro_barrier_with_every_instance_down(policy):
    """The only instance is down at the publication: sync and one_step once waited forever for a
    weight-sync barrier over zero live instances."""
    check_run(_case(policy, [[1]] * 2, 8, {"instances": 1, "max_seqs": 4, "kv_tokens": 100},
                    {"eta": 1, "batch_size": 1, "sync": {"colocated": False}}, steps=3,
                    faults={"fail_at": [[1.0, 0]], "repair_s": 30.0}), policy)


def test_repro_partial_stalls_after_failure_and_load_retries():
    """partial once stopped admitting (stall after 3 of 4 steps) after an instance failure and failed,
    retried weight loads."""
    case = _case("partial", [[2]] * 12, 1, {"instances": 2, "max_seqs": 15, "kv_tokens": 6, "trainer_devices": 2},
                 {"eta": 1, "batch_size": 4, "partial": {"max_concurrent_groups": 1}}, steps=4,
                 faults={"fail_at": [[0.0, 1]], "repair_s": 5.0, "load_fail_prob": 0.3})
    case.data["seed"] = 3  # the load-failure draws
    check_run(case, "partial")


def test_repro_laminar_stalls_after_failures_at_start():
    """Found by the search: the simulator's stall detector fired at the first of three
    simultaneous recoveries (laminar needs 4 slots, the first one back gave it 3)."""
    case = _case("laminar", [[1] * 4] * 4, 1, {"instances": 5, "devices_per_instance": 2, "max_seqs": 1,
                                              "kv_tokens": 2, "trainer_devices": 2},
                 {"eta": 3, "batch_size": 4, "laminar": {"repack": False}}, steps=3,
                 faults={"fail_at": [[0.0, 0], [0.0, 4], [0.0, 2]], "repair_s": 0.5})
    case.data["seed"] = 1
    check_run(case, "laminar")


def test_repro_laminar_refreshes_instances_drained_by_aborts():
    """Found by the full search: a lost trajectory's group-mates were aborted, which drained two
    old-version instances; laminar switched drained instances only after finishes, so nothing
    ran again (a stall at 1 of 4 steps)."""
    lengths = [[2048] * 4] * 9
    case = _case("laminar", lengths, 11, {"instances": 4, "devices_per_instance": 2, "max_seqs": 1,
                                          "kv_tokens": 4196, "trainer_devices": 3},
                 {"eta": 2, "batch_size": 1, "laminar": {"repack": True, "repack_kv": False,
                                                         "repack_occupancy": 1.0, "repack_interval_s": 0.5}},
                 steps=4, faults={"fail_at": [[20.111, 3], [21.652, 3], [0.27, 1]], "repair_s": 0.01,
                                  "mtbf_s": 300.0, "straggler_fraction": 0.5, "straggler_slowdown": 4.0})
    case.data["seed"] = 1
    case.data["cost"] = {"moe_imbalance_cv": 0.3}
    check_run(case, "laminar")


def test_repro_dora_samples_before_dispatching_regenerated_groups():
    """Found by the multi-turn search: one dora action list sampled new groups, then (training a
    batch) dispatched the regenerated stale groups it had numbered already; the new groups'
    dispatches, delivered at once, came first and the simulator refused the ids as not dense."""
    lengths = np.array([[520, 329], [482, 235], [259, 234], [671, 292], [43, 434], [2031, 1803], [142, 719],
                        [128, 333], [95, 504], [217, 132], [168, 178], [417, 200], [242, 135], [54, 761],
                        [830, 125], [88, 412]])
    turns = np.array([[3, 1], [5, 3], [2, 4], [5, 2], [5, 1], [5, 5], [3, 2], [2, 5], [4, 3], [4, 1], [1, 3],
                      [1, 2], [1, 5], [4, 2], [4, 2], [5, 4]])
    waits = np.array([[0.1, 0.1], [0.1, 0.5], [0.1, 0.5], [0.1, 0.5], [0.5, 0.1], [0.1, 0.1], [0.1, 0.1],
                      [0.5, 0.5], [0.5, 0.1], [0.5, 0.1], [0.5, 0.5], [0.1, 0.1], [0.1, 0.1], [0.5, 0.1],
                      [0.1, 0.1], [0.5, 0.5]])
    tool = np.array([[8, 3], [5, 2], [8, 0], [7, 1], [3, 7], [3, 8], [8, 7], [0, 8], [6, 2], [5, 5], [6, 4],
                     [7, 7], [3, 1], [8, 3], [0, 6], [8, 8]])
    trace = S.make_trace(lengths, np.array([2, 8, 1, 5, 1, 6, 7, 3, 8, 5, 8, 2, 2, 1, 8, 2]), 2048, "repro",
                         (turns, waits, tool))
    data = {"trace": trace.path, "policies": ["dora"], "steps": 3, "seed": 3, "cost": {"moe_imbalance_cv": 0.0},
            "cluster": {"instances": 1, "devices_per_instance": 1, "max_seqs": 6, "kv_tokens": 204900,
                        "trainer_devices": 3},
            "policy": {"eta": 1, "batch_size": 4, "group_size": 2,
                       "dora": {"versions_per_instance": 3, "migrate_kv": True,
                                "spread_tails": True, "consolidate": True, "balance": "predicted", "repartition_load": 1.0, "predictor": "none",
                                "max_regenerations": 1, "elastic_trainer": False}}}
    check_run(S.Case(trace, data), "dora")
