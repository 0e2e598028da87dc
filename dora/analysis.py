"""The analysis layer: what plots, the Perfetto export and notebooks read from an event log —
paired segments, intervals, binned occupancy, the bubble decomposition, run labels — computed
once here (staleness and the metrics themselves: `dora.metrics`). No matplotlib here.

Segments: the rows of one trajectory that start a segment (dispatch, migrate_in, resume) and
end one (finish, abort, migrate_out, interrupt, lost, end) alternate in time; each start is
paired with the end row that follows it. An end row with no open segment (an abort of a
trajectory that was interrupted or in transit) is an *orphan*: a marker, not a bar. A start
never closed ends at the trajectory's next start, or at the end of the run (end = "open").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dora.errors import InputError
from dora.eventlog import COLUMNS, SEGMENT_END, SEGMENT_START
from dora.metrics import staleness  # noqa: F401 (the one definition; read here by the plots)


def event_names(df: pd.DataFrame) -> np.ndarray:
    """The event column as an object array of str (fast for the categorical column of read_events)."""
    col = df["event"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories.astype(object))
        codes = col.cat.codes.to_numpy()
        return np.where(codes >= 0, cats[np.maximum(codes, 0)] if len(cats) else "", "")
    return col.astype(str).to_numpy(dtype=object)


def check_log(df: pd.DataFrame, where: str = "event log") -> None:
    """Refuse a frame that is not an event log (one line naming the missing column)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{where}: column '{missing[0]}' missing (an event log has {', '.join(COLUMNS)}); "
                         "pass one written with --events of dora.sim or dora.exec")


def run_end(df: pd.DataFrame) -> float:
    """End of the measured run, as dora.metrics takes it (run_end row, else last publish, else last row)."""
    ev = event_names(df)
    t = df["t_s"].to_numpy()
    end = t[ev == "run_end"]
    if len(end):
        return float(end.max())
    pub = t[ev == "publish"]
    return float(pub.max()) if len(pub) else float(t.max(initial=0.0))


def step_window(df: pd.DataFrame, step: int) -> tuple[float, float]:
    """(t0, t1) of trainer step `step` (1-based) as rollout sees it: from the publication of version
    step - 1 (0 for the first step) to the publication of version `step`."""
    ev = event_names(df)
    pub = np.sort(df["t_s"].to_numpy()[ev == "publish"])
    if not 1 <= step <= len(pub):
        raise InputError(f"step {step}: the log has {len(pub)} published versions; choose 1..{len(pub)}")
    return (float(pub[step - 2]) if step >= 2 else 0.0, float(pub[step - 1]))


def segments(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(segments, orphans). segments: one row per trajectory segment with t0, t1, instance,
    version, trajectory, prompt_id, start/end event names, tokens made, busy_s, prefill_s,
    ctx (tokens carried at the start). orphans: the end rows that closed nothing."""
    ev = event_names(df)
    is_seg = np.isin(ev, SEGMENT_START + SEGMENT_END)
    idx = np.flatnonzero(is_seg)
    traj = df["trajectory"].to_numpy()[idx]
    t = df["t_s"].to_numpy()[idx]
    order = np.lexsort((idx, t, traj))  # by trajectory, then time, then row
    idx, traj, t = idx[order], traj[order], t[order]
    start = np.isin(ev[idx], SEGMENT_START)
    same_next = np.zeros(len(idx), bool)
    same_next[:-1] = traj[1:] == traj[:-1]
    nxt_end = np.zeros(len(idx), bool)
    nxt_end[:-1] = ~start[1:]
    paired = start & same_next & nxt_end
    open_ = start & ~paired
    closes = np.zeros(len(idx), bool)
    closes[1:] = paired[:-1]
    orphan = ~start & ~closes

    s_rows = np.concatenate([idx[paired], idx[open_]])
    e_rows = np.concatenate([idx[np.flatnonzero(paired) + 1], np.full(open_.sum(), -1)])
    t_end = run_end(df)
    # an unclosed start ends where the trajectory's next row is (another start), else at the end of the run
    k_open = np.flatnonzero(open_)
    nxt = np.minimum(k_open + 1, max(len(idx) - 1, 0))
    t_open = np.where(same_next[k_open], t[nxt] if len(idx) else 0.0, max(t_end, float(t.max(initial=0.0))))
    cols = {c: df[c].to_numpy() for c in ("t_s", "instance", "version", "trajectory", "prompt_id", "tokens",
                                          "busy_s", "prefill_s")}
    has_end = e_rows >= 0
    er = np.where(has_end, e_rows, 0)
    seg = pd.DataFrame({
        "trajectory": cols["trajectory"][s_rows],
        "prompt_id": cols["prompt_id"][s_rows],
        "instance": cols["instance"][s_rows].astype(np.int64),
        "version": cols["version"][s_rows].astype(np.int64),
        "t0": cols["t_s"][s_rows],
        "t1": np.where(has_end, cols["t_s"][er], np.concatenate([np.zeros(int(paired.sum())), t_open])),
        "start": ev[s_rows],
        "end": np.where(has_end, ev[er], "open"),
        "ctx": cols["tokens"][s_rows],
        "tokens": np.where(has_end, cols["tokens"][er], 0),
        "busy_s": np.where(has_end, cols["busy_s"][er], 0.0),
        "prefill_s": np.where(has_end, cols["prefill_s"][er], 0.0),
        "end_row": e_rows,
    })
    seg = seg.sort_values(["t0", "instance"], kind="stable").reset_index(drop=True)
    orphans = df.iloc[np.sort(idx[orphan])]
    return seg, orphans


def _pair(df: pd.DataFrame, open_name: str, close_name: str, key: str = "instance") -> pd.DataFrame:
    """Pair open/close rows in order per key (an open row closes at the next close row)."""
    ev = event_names(df)
    sel = np.flatnonzero((ev == open_name) | (ev == close_name))
    k = df[key].to_numpy()[sel]
    t = df["t_s"].to_numpy()[sel]
    order = np.lexsort((sel, t, k))
    sel, k, t = sel[order], k[order], t[order]
    is_open = ev[sel] == open_name
    ok = np.zeros(len(sel), bool)
    ok[:-1] = is_open[:-1] & ~is_open[1:] & (k[1:] == k[:-1])
    i = np.flatnonzero(ok)
    return pd.DataFrame({key: k[i], "t0": t[i], "t1": t[i + 1], "row0": sel[i], "row1": sel[i + 1]})


def tool_calls(df: pd.DataFrame) -> pd.DataFrame:
    """Tool calls of multi-turn trajectories on their instance: instance, trajectory, version, t0
    (tool_start), t1 (the trajectory's next tool_end or segment end there, else the end of the run)."""
    ev = event_names(df)
    sel = np.flatnonzero(np.isin(ev, ("tool_start", "tool_end") + SEGMENT_END))
    traj = df["trajectory"].to_numpy()[sel]
    t = df["t_s"].to_numpy()[sel]
    order = np.lexsort((sel, t, traj))
    sel, traj, t = sel[order], traj[order], t[order]
    k = np.flatnonzero(ev[sel] == "tool_start")
    closed = np.zeros(len(k), bool)
    if len(k):
        nxt = np.minimum(k + 1, len(sel) - 1)
        closed = (k + 1 < len(sel)) & (traj[nxt] == traj[k])
        t1 = np.where(closed, t[nxt], max(run_end(df), float(t.max(initial=0.0))))
    else:
        t1 = np.zeros(0)
    rows = sel[k]
    return pd.DataFrame({"instance": df["instance"].to_numpy()[rows].astype(np.int64),
                         "trajectory": traj[k], "version": df["version"].to_numpy()[rows].astype(np.int64),
                         "t0": t[k], "t1": t1})


def loads(df: pd.DataFrame) -> pd.DataFrame:
    """Weight loads per instance: instance, t0, t1, version, mode."""
    out = _pair(df, "load_start", "load_end")
    out["version"] = df["version"].to_numpy()[out["row1"].to_numpy()] if len(out) else np.zeros(0, int)
    out["mode"] = df["detail"].to_numpy()[out["row0"].to_numpy()].astype(str) if len(out) else []
    return out


def weight_syncs(df: pd.DataFrame) -> pd.DataFrame:
    """Collective weight syncs (executor): t0, t1, version, bytes, detail (of the end row)."""
    out = _pair(df, "weight_sync_start", "weight_sync_end")
    r1 = out["row1"].to_numpy()
    return out.assign(version=df["version"].to_numpy()[r1], bytes=df["tokens"].to_numpy()[r1],
                      detail=df["detail"].to_numpy()[r1].astype(str))


def downtime(df: pd.DataFrame) -> pd.DataFrame:
    """Failed periods per instance (fail -> recover, or to the end of the run)."""
    ev = event_names(df)
    out = _pair(df, "fail", "recover")
    t_end = run_end(df)
    fails = df[ev == "fail"]
    closed = set(out["row0"].tolist())
    extra = [(int(r.instance), float(r.t_s), t_end) for i, r in zip(fails.index, fails.itertuples())
             if df.index.get_loc(i) not in closed]
    if extra:
        out = pd.concat([out, pd.DataFrame(extra, columns=["instance", "t0", "t1"])], ignore_index=True)
    return out


def trainer_steps(df: pd.DataFrame) -> pd.DataFrame:
    """Trainer steps: t0 (train_start), t1 (train_end), t_pub (publish), version (trainer version
    the step trained from; it publishes version + 1), busy_s, tokens."""
    ev = event_names(df)
    df = df.assign(instance=-1)
    st = _pair(df, "train_start", "train_end")
    tv = df["trainer_version"].to_numpy()
    if not len(st):
        return pd.DataFrame(columns=["t0", "t1", "t_pub", "version", "busy_s", "tokens"])
    pub_t = np.sort(df["t_s"].to_numpy()[ev == "publish"])
    j = np.searchsorted(pub_t, st["t1"].to_numpy(), side="left")
    t_pub = np.where(j < len(pub_t), pub_t[np.minimum(j, len(pub_t) - 1)], st["t1"].to_numpy())
    r1 = st["row1"].to_numpy()
    return pd.DataFrame({"t0": st["t0"].to_numpy(), "t1": st["t1"].to_numpy(), "t_pub": t_pub,
                         "version": tv[st["row0"].to_numpy()], "busy_s": df["busy_s"].to_numpy()[r1],
                         "tokens": df["tokens"].to_numpy()[r1]})


def bin_time(t0: np.ndarray, t1: np.ndarray, key: np.ndarray, n_keys: int, edges: np.ndarray,
             weight: np.ndarray | None = None) -> np.ndarray:
    """Seconds (times weight) each interval [t0, t1) spends in each uniform bin, summed per key:
    an (n_keys, n_bins) array. Exact: partial bins at both ends, full bins via a difference array."""
    nb = len(edges) - 1
    out = np.zeros((n_keys, nb))
    if nb < 1 or len(t0) == 0:
        return out
    e0, w = float(edges[0]), float(edges[1] - edges[0])
    a = np.clip(np.asarray(t0, float), e0, float(edges[-1]))
    b = np.clip(np.asarray(t1, float), e0, float(edges[-1]))
    keep = b > a
    a, b, key = a[keep], b[keep], np.asarray(key)[keep]
    wt = np.ones(len(a)) if weight is None else np.asarray(weight, float)[keep]
    b0 = np.minimum(((a - e0) // w).astype(np.int64), nb - 1)
    b1 = np.minimum(((b - e0) // w).astype(np.int64), nb - 1)
    same = b0 == b1
    flat = out.reshape(-1)
    np.add.at(flat, key[same] * nb + b0[same], (b - a)[same] * wt[same])
    d = ~same
    np.add.at(flat, key[d] * nb + b0[d], (e0 + (b0[d] + 1) * w - a[d]) * wt[d])
    np.add.at(flat, key[d] * nb + b1[d], (b[d] - (e0 + b1[d] * w)) * wt[d])
    full = np.zeros((n_keys, nb + 1))
    fl = full.reshape(-1)
    np.add.at(fl, key[d] * (nb + 1) + b0[d] + 1, w * wt[d])
    np.add.at(fl, key[d] * (nb + 1) + b1[d], -w * wt[d])
    out += np.cumsum(full, axis=1)[:, :nb]
    return out


class InstanceTimelines:
    """Counters per rollout instance over time, built from spans (+d at t0, -d at t1); `sweep` cuts
    every instance's timeline at each span's ends: its elementary intervals."""

    def __init__(self, counters: int) -> None:
        self.k = counters
        self.rows: list[np.ndarray] = []  # (instance, t, one delta per counter)

    def add(self, inst, t, col: int, d: float) -> None:
        """`d` added to counter `col` of each `inst` at its time `t` (arrays of one length, or scalars)."""
        t = np.asarray(t, float)
        block = np.zeros((len(t), 2 + self.k))
        block[:, 0], block[:, 1], block[:, 2 + col] = inst, t, d
        self.rows.append(block)

    def span(self, inst, t0, t1, col: int, d: float = 1.0) -> None:
        """Counter `col` of each `inst` raised by `d` over [t0, t1)."""
        self.add(inst, t0, col, d)
        self.add(inst, t1, col, -d)

    def sweep(self, n_inst: int, t_end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(instance, counters, dt) per interval start, over [0, t_end] for instances 0..n_inst-1 (an
        instance with no spans is one interval at all-zero counters): the counters from that time
        on, and the seconds until the instance's next cut (0 at its last)."""
        insts = np.arange(n_inst, dtype=float)
        self.add(insts, np.zeros(n_inst), 0, 0.0)
        self.add(insts, np.full(n_inst, t_end), 0, 0.0)
        a = np.concatenate(self.rows)
        a[:, 1] = np.clip(a[:, 1], 0.0, t_end)
        a = a[np.lexsort((a[:, 1], a[:, 0]))]
        cnt = np.round(np.cumsum(a[:, 2:], axis=0), 6)  # every instance's deltas sum to zero: a global cumsum works
        dt = np.zeros(len(a))
        same = a[1:, 0] == a[:-1, 0]
        dt[:-1] = np.where(same, a[1:, 1] - a[:-1, 1], 0.0)
        return a[:, 0], cnt, dt


BUBBLE_PARTS = ("useful", "empty_slots", "untrained_work", "weight_loading", "waiting_for_trainer", "idle",
                "trainer_waiting", "down")
BUBBLE_LABELS = {
    "useful": "useful (trained decode + prefill, training)",
    "empty_slots": "empty decode slots",
    "untrained_work": "work not trained (aborted, discarded, in flight at end)",
    "weight_loading": "weight loading / publication",
    "waiting_for_trainer": "rollout idle while the trainer works",
    "idle": "rollout idle, trainer idle too",
    "trainer_waiting": "trainer waiting for rollout data",
    "down": "instance failed",
}


def bubble_breakdown(df: pd.DataFrame, run: dict | None = None) -> dict:
    """Device-seconds of one run split into BUBBLE_PARTS, plus `total` and `bubble_ratio`.

    Same accounting as dora.metrics: total = (rollout + trainer devices) x run length
    (colocated: rollout devices x run length, the trainer time-sharing them); useful = decode-slot
    share + prefill of trajectories that end up trained + trainer step compute, so
    1 - useful / total equals compute_metrics' bubble_ratio. The rest, per rollout instance over
    elementary intervals of its timeline: failed > loading weights > holding at least one
    trajectory (occupied: the part of it not covered by any trajectory's busy_s/prefill_s is
    empty decode slots) > idle while a trainer step or publication runs (colocated: the step
    itself is the trainer's useful compute) > idle. Trainer devices (disaggregated): compute,
    publication (weight loading) and the rest (waiting for rollout data).
    """
    check_log(df)
    run = run if run is not None else df.attrs.get("run", {})
    t_end = run_end(df)
    colocated = bool(run.get("colocated", False))
    rollout_devices = int(run.get("rollout_devices", 0))
    trainer_devices = int(run.get("trainer_devices", 0))
    if trainer_devices < 1 and not colocated:
        raise InputError("event log: run metadata 'dora.run' gives no trainer devices (trainer_devices missing or 0, "
                         "not colocated); write the log with dora.sim or dora.exec --events")
    n_inst = int(run.get("instances", 0))
    dpi = int(run.get("devices_per_instance", 0)) or (rollout_devices // n_inst if n_inst else 0)
    if not (rollout_devices and n_inst and dpi):
        raise InputError("event log: run facts (instances, devices_per_instance, rollout_devices) missing from "
                         "the parquet metadata 'dora.run'; write the log with dora.eventlog.write_events")
    ev = event_names(df)
    seg, _ = segments(df)
    tr_traj = df["trajectory"].to_numpy()[ev == "train"]
    trained = np.isin(seg["trajectory"].to_numpy(), tr_traj)
    work = seg["busy_s"].to_numpy() + seg["prefill_s"].to_numpy()
    steps = trainer_steps(df)
    useful_roll = float(work[trained].sum())
    useful_train = float(df["busy_s"].to_numpy()[ev == "train_end"].sum())
    untrained = float(work[~trained].sum())

    # elementary intervals per instance: counters of open segments, loads, failures, trainer activity
    ld, dn = loads(df), downtime(df)
    tl = InstanceTimelines(5)  # open segments, loads, failures, training, publishing
    si = seg["instance"].to_numpy()
    tl.span(si, seg["t0"].to_numpy(), seg["t1"].to_numpy(), 0)
    tl.span(ld["instance"].to_numpy(), ld["t0"].to_numpy(), ld["t1"].to_numpy(), 1)
    tl.span(dn["instance"].to_numpy(), dn["t0"].to_numpy(), dn["t1"].to_numpy(), 2)
    n_inst = max(n_inst, int(seg["instance"].to_numpy().max(initial=-1)) + 1,
                 int(ld["instance"].to_numpy().max(initial=-1)) + 1)
    insts = np.arange(n_inst, dtype=float)
    for t0, t1, col in ((steps["t0"], steps["t1"], 3), (steps["t1"], steps["t_pub"], 4)):
        t0, t1 = np.asarray(t0, float), np.asarray(t1, float)
        tl.span(np.repeat(insts, len(t0)), np.tile(t0, n_inst), np.tile(t1, n_inst), col)
    inst, cnt, dt = tl.sweep(n_inst, t_end)
    # elastic instances run on the trainer's devices: their time is the trainer's, not the rollout's
    el = np.isin(inst, np.asarray(list(run.get("elastic_instances", [])), dtype=float))
    down = cnt[:, 2] > 0
    loading = ~down & (cnt[:, 1] > 0)
    occupied = ~down & ~loading & (cnt[:, 0] > 0)
    free = ~down & ~loading & ~occupied
    training = free & (cnt[:, 3] > 0) & ~el
    publishing = free & ~training & (cnt[:, 4] > 0) & ~el
    idle = free & ~training & ~publishing & ~el
    s = lambda m: float(dt[m].sum()) * dpi  # noqa: E731

    out = dict.fromkeys(BUBBLE_PARTS, 0.0)
    out["useful"] = useful_roll + useful_train
    out["untrained_work"] = untrained
    out["empty_slots"] = s(occupied) - useful_roll - untrained
    out["weight_loading"] = s(loading)
    out["down"] = s(down)
    out["idle"] = s(idle)
    if colocated:
        # the step runs on the rollout devices: its compute is useful_train; what remains of it is idle
        out["waiting_for_trainer"] = s(publishing)
        out["idle"] += s(training) - useful_train
        total = rollout_devices * t_end
    else:
        out["waiting_for_trainer"] = s(training) + s(publishing)
        pub_t = float((steps["t_pub"] - steps["t1"]).sum()) if len(steps) else 0.0
        out["weight_loading"] += pub_t * trainer_devices
        out["trainer_waiting"] = (trainer_devices * (t_end - pub_t) - useful_train - s(occupied & el)
                                  - s(loading & el) - s(down & el))
        total = (rollout_devices + trainer_devices) * t_end
    out["total"] = float(total)
    out["bubble_ratio"] = 1.0 - out["useful"] / total if total > 0 else 0.0
    return out


def label_runs(logs) -> list[tuple[str, pd.DataFrame]]:
    """(label, log) pairs from a dict {label: log} or a list of logs (labelled by their policy;
    repeated policies get the trace name or an index added)."""
    if isinstance(logs, dict):
        return list(logs.items())
    logs = list(logs)
    names = [str(d.attrs.get("run", {}).get("policy", f"run {i}")) for i, d in enumerate(logs)]
    if len(set(names)) < len(names):
        traces = [str(d.attrs.get("run", {}).get("trace", "")).rsplit("/", 1)[-1].removesuffix(".parquet")
                  for d in logs]
        names = [f"{n}\n{t}" if t else f"{n} #{i}" for i, (n, t) in enumerate(zip(names, traces))]
        if len(set(names)) < len(names):
            names = [f"{n} #{i}" for i, n in enumerate(names)]
    return list(zip(names, logs))
