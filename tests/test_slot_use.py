"""dora.slot_use: rollout instance-time by state and slot occupancy, and groups in flight against
the staleness cap, pinned by hand and checked on simulated runs; the `slots` plot from the
command line."""

from __future__ import annotations

import pytest

from dora.errors import InputError
from dora.eventlog import EventLog, write_events
from dora.plots import slot_table
from dora.plots.__main__ import main as plots_main
from dora.sim.run import simulate
from dora.slot_use import STATES, in_flight, slot_use
from tests.conftest import small_plot_config
from tests.plots.common import PNG


def _hand_log():
    """1 instance with 2 decode slots, 20 s. Trajectory 0 (version 0) runs 0-10 s with a tool call
    6-7 s; trajectory 1 (version 0) runs 2-4 s (aborted); version 1 is published at 5 s; the
    instance loads it 10-12 s and holds nothing after."""
    log = EventLog({"policy": "hand", "instances": 1, "devices_per_instance": 1, "rollout_devices": 1,
                    "trainer_devices": 1, "colocated": False, "max_seqs": 2, "eta": 1, "group_size": 2,
                    "body": "sim"})
    log.add(0.0, "sample", prompt_id=0, tokens=2)
    log.add(0.0, "dispatch", 0, 0, 0, 0, tokens=5)
    log.add(2.0, "dispatch", 0, 1, 0, 0, tokens=5)
    log.add(4.0, "abort", 0, 1, 0, 0, tokens=3, detail="stale", dur_s=2.0, busy_s=1.0)
    log.add(5.0, "publish", version=1, trainer_version=1, dur_s=1.0)
    log.add(6.0, "tool_start", 0, 0, 0, 0, tokens=20, dur_s=1.0)
    log.add(7.0, "tool_end", 0, 0, 0, 0, tokens=4)
    log.add(10.0, "finish", 0, 0, 0, 0, tokens=7, dur_s=10.0, busy_s=9.0)
    log.add(10.0, "load_start", 0, version=1, detail="drain")
    log.add(12.0, "load_end", 0, version=1, detail="drain", dur_s=2.0)
    log.add(20.0, "run_end", trainer_version=1)
    return log.to_frame()


def test_slot_use_by_hand():
    s = slot_use(_hand_log())
    assert s.loc["all", "instance_s"] == pytest.approx(20.0)
    # 0-5 s: version 0 is the newest; held 1, 2, 1 trajectories over 2, 2, 1 s of 2 slots
    assert s.loc["newest", "instance_s"] == pytest.approx(5.0)
    assert s.loc["newest", "occupancy"] == pytest.approx((2 * 0.5 + 2 * 1.0 + 1 * 0.5) / 5)
    # 5-6 and 7-10 s: version 1 is out, trajectory 0 still runs on version 0 (6-7 s: in its tool call)
    assert s.loc["older", "instance_s"] == pytest.approx(4.0)
    assert s.loc["older", "occupancy"] == pytest.approx(0.5)
    assert s.loc["loading", "instance_s"] == pytest.approx(2.0)
    assert s.loc["empty", "instance_s"] == pytest.approx(1.0 + 8.0)  # the tool call, then 12-20 s
    assert s.loc["down", "instance_s"] == 0.0
    assert s.loc[list(STATES), "share"].sum() == pytest.approx(1.0)
    assert s.loc["all", "occupancy"] == pytest.approx((5 * 0.7 + 4 * 0.5) / 20)


def test_slot_use_refuses_a_log_without_run_facts():
    df = _hand_log()
    df.attrs["run"] = {**df.attrs["run"], "max_seqs": "two"}
    with pytest.raises(InputError, match="max_seqs 'two', not an integer >= 1"):
        slot_use(df)


def _flight_log():
    """B = 1, eta = 1 (cap 2 groups), 10 s: groups sampled at 0, 2 and 6 s; the first trained at
    5 s (two trajectory rows), the second at 8 s; the third still in flight at the end."""
    log = EventLog({"policy": "hand", "instances": 1, "devices_per_instance": 1, "rollout_devices": 1,
                    "trainer_devices": 1, "colocated": False, "max_seqs": 2, "eta": 1, "batch_size": 1,
                    "group_size": 2, "body": "sim"})
    for t, g in ((0.0, 0), (2.0, 1), (6.0, 2)):
        log.add(t, "sample", prompt_id=g, tokens=2)
    for t, g in ((5.0, 0), (8.0, 1)):
        for k in range(2):
            log.add(t, "train", -1, 2 * g + k, g, 0, trainer_version=g, tokens=3)
    log.add(10.0, "run_end", trainer_version=2)
    return log.to_frame()


def test_in_flight_by_hand():
    f = in_flight(_flight_log())
    # 1 group over 0-2 s, 2 over 2-5, 1 over 5-6, 2 over 6-8, 1 over 8-10: 15 group-seconds in 10 s
    assert f["groups"] == pytest.approx(1.5)
    assert f["cap"] == 2 and f["share"] == pytest.approx(0.75)


def test_in_flight_refuses_a_log_without_the_batch_size():
    df = _flight_log()
    df.attrs["run"] = {k: v for k, v in df.attrs["run"].items() if k != "batch_size"}
    with pytest.raises(InputError, match="batch_size missing"):
        in_flight(df)


@pytest.fixture(scope="module")
def logs(small_trace, small, policy_logs):
    """sync and dora from the session's policy_logs, laminar on the same trace and cluster."""
    laminar = simulate(small, small_plot_config(small_trace), "laminar", progress=False).events
    return {"sync": policy_logs["sync"], "laminar": laminar, "dora": policy_logs["dora"]}


@pytest.mark.parametrize("policy", ("sync", "laminar", "dora"))
def test_slot_use_accounts_for_every_instance_second(logs, policy):
    df = logs[policy]
    s = slot_use(df)
    run = df.attrs["run"]
    end = float(df["t_s"][df["event"] == "run_end"].max())
    assert s.loc["all", "instance_s"] == pytest.approx(run["instances"] * end)
    assert s.loc[list(STATES), "share"].sum() == pytest.approx(1.0)
    assert 0.0 <= s.loc["all", "occupancy"] <= 1.0
    if policy == "sync":  # a synchronous step finishes every trajectory before it publishes
        assert s.loc["older", "instance_s"] == pytest.approx(0.0, abs=1e-9)
    f = in_flight(df)  # every policy admits at most (eta + 1) x B untrained groups
    assert f["cap"] == (run["eta"] + 1) * run["batch_size"] and 0.0 < f["share"] <= 1.0


def test_slots_plot_from_the_command_line(logs, tmp_path):
    paths = []
    for p, df in logs.items():
        write_events(df, tmp_path / f"ev.{p}.parquet")
        paths.append(str(tmp_path / f"ev.{p}.parquet"))
    out = tmp_path / "slots.png"
    assert plots_main(["slots", *paths, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    tab = slot_table(logs)
    assert list(tab["run"]) == ["sync", "laminar", "dora"]
    assert ((tab["in_flight_share"] > 0) & (tab["in_flight_share"] <= 1)).all()
