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

`in_flight`: why slots may stay empty on the policy's side: groups sampled and not yet trained,
averaged over the run, against the (η + 1)·B that the staleness bound lets a policy have in flight
(every policy here admits at most (latest version + η + 1)·B groups minus those trained).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dora.analysis import InstanceTimelines, check_log, downtime, event_names, loads, run_end, segments, tool_calls
from dora.metrics import run_fact

STATES = ("newest", "older", "loading", "empty", "down")


def _facts(df: pd.DataFrame, run: dict | None, why: str, **low: int) -> tuple[dict, tuple[int, ...]]:
    """The checked log's run metadata (`run`, else the log's) and its integer facts `low` names,
    each at least its value (`run_fact`; `why`: what they are needed for)."""
    check_log(df)
    run = run if run is not None else df.attrs.get("run", {})
    return run, tuple(run_fact(run, k, v, "event log", why) for k, v in low.items())


def _superseded(t0: np.ndarray, t1: np.ndarray, version: np.ndarray, pub_t: np.ndarray) -> np.ndarray:
    """Per interval [t0, t1] of a trajectory of `version`: when its version stops being the newest
    (the publication of version + 1, `pub_t[version + 1]`; never: t1), clipped to the interval."""
    nxt = pub_t[np.clip(version.astype(np.int64) + 1, 0, len(pub_t) - 1)]
    return np.clip(nxt, t0, t1)


def slot_use(df: pd.DataFrame, run: dict | None = None) -> pd.DataFrame:
    """One row per state of STATES: `instance_s` (instance-seconds), `share` (of all rollout
    instance-time), `occupancy` (mean held trajectories / max_seqs in that state), plus a row
    `all` (share 1, occupancy over the whole run)."""
    run, (n_inst, max_seqs) = _facts(df, run, "slot occupancy is held trajectories over the instances' decode "
                                     "slots", instances=1, max_seqs=1)
    t_end = run_end(df)
    ev = event_names(df)
    pv = df["version"].to_numpy()[ev == "publish"].astype(np.int64)
    pt = df["t_s"].to_numpy()[ev == "publish"]
    pub_t = np.full(int(pv.max(initial=0)) + 2, np.inf)  # publication time by version (last slot: never)
    order = np.argsort(-pt)  # the first publication of a version wins
    pub_t[pv[order]] = pt[order]

    tl = InstanceTimelines(4)  # held of the newest version, held of an older one, loads, failures
    seg, _ = segments(df)
    for frame, d in ((seg, 1.0), (tool_calls(df), -1.0)):  # a tool call frees its decode slot
        inst, t0, t1 = frame["instance"].to_numpy(), frame["t0"].to_numpy(float), frame["t1"].to_numpy(float)
        cut = _superseded(t0, t1, frame["version"].to_numpy(), pub_t)
        tl.span(inst, t0, cut, 0, d)  # newest until its version is superseded, older after
        tl.span(inst, cut, t1, 1, d)
    for frame, col in ((loads(df), 2), (downtime(df), 3)):
        tl.span(frame["instance"].to_numpy(), frame["t0"].to_numpy(float), frame["t1"].to_numpy(float), col)
    inst, cnt, dt = tl.sweep(n_inst, t_end)
    elastic = np.asarray(list(run.get("elastic_instances", [])), dtype=float)
    dt = np.where((inst < n_inst) & ~np.isin(inst, elastic), dt, 0.0)  # rollout instances only
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


def in_flight(df: pd.DataFrame, run: dict | None = None) -> dict:
    """`groups`: groups sampled and not yet trained, averaged over [0, run end] (a group counts
    from its `sample` row to the time its `train` rows are written; a regenerated group stays in
    flight); `cap`: (η + 1)·B; `share`: groups / cap."""
    _, (eta, batch) = _facts(df, run, "groups in flight are compared with the (eta + 1) x B the staleness "
                             "bound admits", eta=0, batch_size=1)
    t_end = run_end(df)
    ev = event_names(df)
    t = df["t_s"].to_numpy(float)
    started = t[ev == "sample"]
    tr = ev == "train"
    trained = pd.DataFrame({"t": t[tr], "g": df["prompt_id"].to_numpy()[tr]}).drop_duplicates()["t"].to_numpy(float)
    times = np.concatenate([started, trained])
    step = np.concatenate([np.ones(len(started)), -np.ones(len(trained))])
    order = np.argsort(times, kind="stable")
    times, level = np.minimum(times[order], t_end), np.cumsum(step[order])
    spans = np.diff(np.append(times, t_end))
    groups = float((level * spans).sum()) / t_end if t_end > 0 else 0.0
    cap = (eta + 1) * batch
    return {"groups": groups, "cap": cap, "share": groups / cap}
