"""Metrics and C1-C3 from a hand-written event log."""

from __future__ import annotations

import pytest

from dora.eventlog import EventLog, read_events, write_events
from dora.metrics import METRIC_NAMES, compute_metrics, staleness

RUN = {"eta": 1, "group_size": 2, "rollout_devices": 2, "trainer_devices": 1, "colocated": False}


def _log() -> EventLog:
    """One instance of 2 devices, groups 10 and 11 of 2 samples, trainer on 1 device.

    traj 0, 1 (group 10, version 0): 100 and 50 tokens, trained at trainer version 0.
    traj 2 (group 11, v0) is aborted after 30 tokens; the group is regenerated as traj 3, 4
    (version 1) and trained at trainer version 2 (staleness 1). traj 4 was interrupted and
    resumed under version 2 (two versions: a C1 violation) after re-prefilling 40 tokens.
    """
    log = EventLog(dict(RUN))
    a = log.add
    a(0.0, "sample", prompt_id=10, tokens=2)
    a(0.0, "sample", prompt_id=11, tokens=2)
    for traj, pid in ((0, 10), (1, 10), (2, 11)):
        a(0.0, "dispatch", 0, traj, pid, 0, tokens=10)
    a(5.0, "finish", 0, 1, 10, 0, tokens=50, busy_s=2.0, prefill_s=0.5)
    a(8.0, "finish", 0, 0, 10, 0, tokens=100, busy_s=3.0, prefill_s=0.5)
    a(8.0, "train", -1, 0, 10, 0, 0, tokens=100)
    a(8.0, "train", -1, 1, 10, 0, 0, tokens=50)
    a(8.0, "train_start", trainer_version=0, tokens=170)
    a(9.0, "abort", 0, 2, 11, 0, tokens=30, busy_s=1.0, detail="stale")
    a(9.0, "regenerate", prompt_id=11, tokens=2, detail="stale")
    a(10.0, "train_end", trainer_version=0, tokens=170, dur_s=2.0, busy_s=2.0)
    a(10.0, "publish", version=1, trainer_version=1)
    a(10.0, "dispatch", 0, 3, 11, 1, tokens=10)
    a(10.0, "dispatch", 0, 4, 11, 1, tokens=10)
    a(12.0, "interrupt", 0, 4, 11, 1, tokens=20, busy_s=0.5)
    a(14.0, "resume", 0, 4, 11, 2, tokens=40)
    a(15.0, "finish", 0, 3, 11, 1, tokens=60, busy_s=2.0, prefill_s=0.5)
    a(16.0, "finish", 0, 4, 11, 2, tokens=40, busy_s=1.5, prefill_s=0.5)
    a(16.0, "train", -1, 3, 11, 1, 2, tokens=60)
    a(16.0, "train", -1, 4, 11, 1, 2, tokens=60)
    a(16.0, "train_start", trainer_version=2, tokens=140)
    a(17.0, "train_end", trainer_version=2, tokens=140, dur_s=1.0, busy_s=1.0)
    a(20.0, "publish", version=2, trainer_version=2)
    a(20.0, "run_end", trainer_version=2)
    return log


def test_hand_computed_metrics(tmp_path):
    df = _log().to_frame()
    m = compute_metrics(df)
    assert set(METRIC_NAMES) <= set(m)
    assert m["steps"] == 2 and m["trained_samples"] == 4
    assert m["step_time_mean_s"] == pytest.approx(10.0)
    # steady state: trajectories trained at trainer versions >= 1, over publish 1 -> publish 2
    assert m["e2e_samples_per_s"] == pytest.approx(2 / 10.0)
    assert m["e2e_tokens_per_s"] == pytest.approx(120 / 10.0)
    assert m["staleness_mean"] == pytest.approx((0 + 0 + 1 + 1) / 4) and m["staleness_max"] == 1
    assert m["c1_violations"] == 1 and m["c3_violations"] == 0
    assert m["c2_lost"] == 0 and m["c2_duplicated"] == 0
    generated = 50 + 100 + 30 + 20 + 60 + 40
    assert m["rollout_tokens_per_s"] == pytest.approx(generated / 20.0)
    assert m["waste_ratio"] == pytest.approx((30 + 40) / generated)  # aborted tokens + re-prefill
    assert m["reprefill_tokens"] == 40
    useful_roll = 2.0 + 0.5 + 3.0 + 0.5 + 0.5 + 2.0 + 0.5 + 1.5 + 0.5
    assert m["rollout_bubble_ratio"] == pytest.approx(1 - useful_roll / (2 * 20.0))
    assert m["trainer_bubble_ratio"] == pytest.approx(1 - 3.0 / 20.0)
    assert m["bubble_ratio"] == pytest.approx(1 - (useful_roll + 3.0) / (3 * 20.0))
    # a parquet round trip gives the same numbers
    write_events(df, tmp_path / "ev.parquet")
    assert compute_metrics(read_events(tmp_path / "ev.parquet")) == m


def test_staleness_per_trained_trajectory_counts_from_the_first_token():
    """Per train row: trainer version minus the version of the first token. traj 4 resumed under
    version 2, and a train row claiming version 2 for it changes nothing."""
    df = _log().to_frame()
    assert staleness(df).tolist() == [0, 0, 1, 1]
    tr = df.index[df["event"].astype(str) == "train"][-1]
    df.loc[tr, "version"] = 2  # (an executor may log the newest version a trajectory saw)
    assert staleness(df).tolist() == [0, 0, 1, 1]


def test_lost_and_duplicated_groups():
    log = _log()
    log.add(20.0, "sample", prompt_id=12, tokens=2)  # sampled, never trained, not left over: lost
    log.add(20.0, "train", -1, 3, 11, 1, 2, tokens=60)  # group 11 trained again in another step
    log.add(20.0, "train", -1, 3, 11, 1, 3, tokens=60)
    m = compute_metrics(log.to_frame())
    assert m["c2_lost"] == 1 and m["c2_duplicated"] == 1


def test_staleness_violation():
    run = dict(RUN, eta=0)
    m = compute_metrics(_log().to_frame(), run)
    assert m["c3_violations"] == 2


@pytest.mark.parametrize("key, value", [("eta", None), ("eta", -1), ("eta", "2"), ("group_size", None),
                                        ("rollout_devices", 0), ("rollout_devices", None), ("trainer_devices", 0),
                                        ("colocated", "yes")])
def test_missing_run_facts_are_refused_not_defaulted(key, value):
    """No C3 count without eta, no bubble ratio without device counts (a colocated run's trainer
    shares the rollout devices: 0 trainer devices is fine there)."""
    from dora.errors import InputError

    run = {k: v for k, v in RUN.items() if k != key} if value is None else dict(RUN, **{key: value})
    with pytest.raises(InputError, match=key):
        compute_metrics(_log().to_frame(), run)
    compute_metrics(_log().to_frame(), dict(RUN, trainer_devices=0, colocated=True))
