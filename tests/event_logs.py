"""Event logs for the analysis and plot tests: a hand-made one whose bubble decomposition is
known, and the policies of the small simulated runs (fixtures policy_runs / policy_logs in conftest)."""

from __future__ import annotations

import pandas as pd

from dora.eventlog import EventLog

POLICIES = ("sync", "partial", "dora")  # the runs of the policy_runs fixture


def hand_log() -> pd.DataFrame:
    """1 instance x 2 devices (2 slots), 2 trainer devices, run of 20 s:
    trajectory 0 queued/decoding 0-10 s (busy 10 device-s, prefill 1), a weight load 10-12 s,
    a train step 12-14 s (4 device-s), publication 14-15 s; trajectory 1 aborted 2-4 s (busy 1)."""
    log = EventLog({"policy": "hand", "instances": 1, "devices_per_instance": 2, "rollout_devices": 2,
                    "trainer_devices": 2, "colocated": False, "max_seqs": 2, "eta": 1, "group_size": 2,
                    "body": "sim"})
    log.add(0.0, "sample", prompt_id=0, tokens=2)
    log.add(0.0, "dispatch", 0, 0, 0, 0, tokens=5)
    log.add(2.0, "dispatch", 0, 1, 0, 0, tokens=5)
    log.add(4.0, "abort", 0, 1, 0, 0, tokens=3, detail="stale", dur_s=2.0, busy_s=1.0)
    log.add(10.0, "finish", 0, 0, 0, 0, tokens=7, dur_s=10.0, busy_s=10.0, prefill_s=1.0)
    log.add(10.0, "load_start", 0, version=1, detail="drain")
    log.add(12.0, "load_end", 0, version=1, detail="drain", dur_s=2.0)
    log.add(12.0, "train", -1, 0, 0, 0, 0, tokens=7)
    log.add(12.0, "train_start", trainer_version=0, tokens=12)
    log.add(14.0, "train_end", trainer_version=0, tokens=12, dur_s=2.0, busy_s=4.0)
    log.add(15.0, "publish", version=1, trainer_version=1, dur_s=1.0)
    log.add(20.0, "run_end", trainer_version=1)
    return log.to_frame()
