"""Where a run's decode slots go: rollout instance-time split by what the instance was doing, with
how full its slots were meanwhile. Read from the event log (the analysis layer: `dora.analysis`).

States of a rollout instance at each moment, first that applies:
- `down`: failed;
- `loading`: loading weights;
- `older`: holding a trajectory of a version older than the newest published (draining: under
  C1 such a trajectory finishes on the version it started with, and no policy that keeps C1
  gives the instance new work of that version);
- `newest`: holding trajectories, all of the newest published version;
- `empty`: holding none.

A trajectory is held from its segment's start to its end (dispatch or migration in, to finish,
abort, migration out...), except while it waits on a tool call (its decode slot is free then,
its KV kept). `occupancy` is the held trajectories over the instance's decode slots (`max_seqs`),
averaged over the state's time. Elastic instances (on the trainer's devices) are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dora.analysis import check_log, downtime, event_names, loads, run_end, segments, tool_calls
from dora.metrics import run_fact

STATES = ("newest", "older", "loading", "empty", "down")


def _superseded(t0: np.ndarray, t1: np.ndarray, version: np.ndarray, pub: dict[int, float]) -> np.ndarray:
    """Per interval [t0, t1] of a trajectory of `version`: when its version stops being the newest
    (the publication of version + 1; never: t1), clipped to the interval."""
    nxt = np.array([pub.get(int(v) + 1, np.inf) for v in version], dtype=float)
    return np.clip(nxt, t0, t1)


def slot_use(df: pd.DataFrame, run: dict | None = None) -> pd.DataFrame:
    """One row per state of STATES: `instance_s` (instance-seconds), `share` (of all rollout
    instance-time), `occupancy` (mean held trajectories / max_seqs in that state), plus a row
    `all` (share 1, occupancy over the whole run)."""
    check_log(df)
    run = run if run is not None else df.attrs.get("run", {})
    why = "slot occupancy is held trajectories over the instances' decode slots"
    n_inst = run_fact(run, "instances", 1, "event log", why)
    max_seqs = run_fact(run, "max_seqs", 1, "event log", why)
    t_end = run_end(df)
    ev = event_names(df)
    pub: dict[int, float] = {}
    for v, t in zip(df["version"].to_numpy()[ev == "publish"], df["t_s"].to_numpy()[ev == "publish"]):
        pub.setdefault(int(v), float(t))

    # deltas per instance: (instance, t, d_new, d_old, d_load, d_down)
    blocks = []

    def add(inst, t, col, d):
        b = np.zeros((len(t), 6))
        b[:, 0], b[:, 1], b[:, 2 + col] = inst, t, d
        blocks.append(b)

    def held(inst, t0, t1, version, sign):
        cut = _superseded(t0, t1, version, pub)
        add(inst, t0, 0, sign)  # newest from the start ...
        add(inst, cut, 0, -sign)  # ... until its version is superseded
        add(inst, cut, 1, sign)  # older from then ...
        add(inst, t1, 1, -sign)  # ... to the end

    seg, _ = segments(df)
    tc = tool_calls(df)
    for frame, sign in ((seg, 1.0), (tc, -1.0)):
        held(frame["instance"].to_numpy(), frame["t0"].to_numpy(float), frame["t1"].to_numpy(float),
             frame["version"].to_numpy(), sign)
    for frame, col in ((loads(df), 2), (downtime(df), 3)):
        add(frame["instance"].to_numpy(), frame["t0"].to_numpy(float), col, 1.0)
        add(frame["instance"].to_numpy(), frame["t1"].to_numpy(float), col, -1.0)
    insts = np.arange(n_inst, dtype=float)
    add(insts, np.zeros(n_inst), 0, 0.0)
    add(insts, np.full(n_inst, t_end), 0, 0.0)
    a = np.concatenate(blocks)
    a[:, 1] = np.clip(a[:, 1], 0.0, t_end)
    elastic = np.asarray(list(run.get("elastic_instances", [])), dtype=float)
    a = a[(a[:, 0] < n_inst) & ~np.isin(a[:, 0], elastic)]
    a = a[np.lexsort((a[:, 1], a[:, 0]))]
    cnt = np.round(np.cumsum(a[:, 2:], axis=0), 6)  # each instance's deltas sum to zero
    dt = np.zeros(len(a))
    same = a[1:, 0] == a[:-1, 0]
    dt[:-1] = np.where(same, a[1:, 1] - a[:-1, 1], 0.0)
    n_new, n_old = np.maximum(cnt[:, 0], 0.0), np.maximum(cnt[:, 1], 0.0)
    down = cnt[:, 3] > 0
    loading = ~down & (cnt[:, 2] > 0)
    older = ~down & ~loading & (n_old > 0)
    newest = ~down & ~loading & ~older & (n_new > 0)
    empty = ~down & ~loading & ~older & ~newest
    fill = np.minimum(n_new + n_old, max_seqs) / max_seqs
    total = float(dt.sum())
    rows = []
    for name, m in zip(STATES, (newest, older, loading, empty, down)):
        s = float(dt[m].sum())
        rows.append((name, s, s / total if total > 0 else 0.0, float((fill[m] * dt[m]).sum()) / s if s > 0 else 0.0))
    rows.append(("all", total, 1.0 if total > 0 else 0.0, float((fill * dt).sum()) / total if total > 0 else 0.0))
    return pd.DataFrame(rows, columns=["state", "instance_s", "share", "occupancy"]).set_index("state")
