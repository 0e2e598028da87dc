"""Export an event log as Chrome / Perfetto trace-event JSON (open it in ui.perfetto.dev or
chrome://tracing).

Layout:
- one process per rollout instance ("instance 12"), sorted by id. An instance holds many
  trajectories at once, and complete slices on one thread must nest, so its trajectory
  segments are spread over "slot" threads (tid 1, 2, ...: the first slot free at the segment's
  start, a greedy interval partition; the number of slots used is the instance's peak of held
  trajectories, queued ones included). Thread 0, "weights & events", carries the weight loads
  and the instant events (migrations, interruptions, aborts, preemptions, failures);
- one process "trainer" with a "steps" thread (train_start -> train_end, then the publication)
  and instants for each publication, and a "weight sync" thread: one slice per collective
  broadcast (weight_sync_start -> weight_sync_end), its bytes and members in args;
- a segment is one complete event ("ph": "X") named by its policy version ("v3": the viewer
  colours slices by name, so versions are distinguishable); args carry trajectory, prompt_id,
  version, tokens made, context tokens at the start, and how it started and ended; a
  multi-turn trajectory's tool calls are "tool call" slices nested in its segment (its decode
  slot is free meanwhile);
- timestamps and durations in microseconds of the log's clock (simulated or wall seconds).
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

import numpy as np
import pandas as pd

from dora import io
from dora.analysis import (check_log, event_names, label_runs, loads, segments, tool_calls, trainer_steps,
                           weight_syncs)

TRAINER_PID = 1
INSTANCE_PID0 = 100  # instance i is pid INSTANCE_PID0 + i
INSTANTS = ("migrate_out", "migrate_in", "interrupt", "abort", "preempt", "fail", "recover", "lost")


def _ns(t) -> int:
    return int(round(float(t) * 1e9))


def _us(t) -> float:
    """Seconds -> microseconds, on a whole-nanosecond grid (so that ts + dur of one slice equals
    the ts of a slice starting when it ends)."""
    return _ns(t) / 1000.0


def _dur(t0, t1) -> float:
    return max(0, _ns(t1) - _ns(t0)) / 1000.0


def lanes(seg: pd.DataFrame) -> np.ndarray:
    """Slot (1-based) of each segment on its instance: the lowest slot free at its start."""
    out = np.zeros(len(seg), np.int64)
    order = np.lexsort((seg["t1"].to_numpy(), seg["t0"].to_numpy(), seg["instance"].to_numpy()))
    inst = seg["instance"].to_numpy()[order]
    t0 = seg["t0"].to_numpy()[order]
    t1 = seg["t1"].to_numpy()[order]
    busy: list[tuple[float, int]] = []  # (end, slot) of slots in use on the current instance
    free: list[int] = []
    top = 0
    cur = None
    for k in range(len(order)):
        if inst[k] != cur:
            cur, busy, free, top = inst[k], [], [], 0
        while busy and busy[0][0] <= t0[k]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            slot = heapq.heappop(free)
        else:
            top += 1
            slot = top
        heapq.heappush(busy, (t1[k], slot))
        out[order[k]] = slot
    return out


def trace_events(df: pd.DataFrame) -> dict:
    """The trace-event document: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}."""
    check_log(df)
    run = df.attrs.get("run", {})
    ev = event_names(df)
    seg, _ = segments(df)
    seg = seg[seg["instance"] >= 0]
    slot = lanes(seg)
    out: list[dict] = []

    def meta(pid: int, tid: int | None, name: str, value) -> None:
        e = {"ph": "M", "pid": pid, "tid": 0 if tid is None else tid, "name": name, "args": value}
        out.append(e)

    all_inst = df["instance"].to_numpy()
    insts = sorted(set(seg["instance"].tolist()) | set(all_inst[all_inst >= 0].tolist()))
    meta(TRAINER_PID, None, "process_name", {"name": "trainer"})
    meta(TRAINER_PID, None, "process_sort_index", {"sort_index": 0})
    meta(TRAINER_PID, 1, "thread_name", {"name": "steps"})
    if (ev == "weight_sync_end").any():
        meta(TRAINER_PID, 2, "thread_name", {"name": "weight sync"})
    max_slot = pd.Series(slot).groupby(seg["instance"].to_numpy()).max().to_dict() if len(seg) else {}
    for i in insts:
        pid = INSTANCE_PID0 + int(i)
        meta(pid, None, "process_name", {"name": f"instance {int(i)}"})
        meta(pid, None, "process_sort_index", {"sort_index": int(i) + 1})
        meta(pid, 0, "thread_name", {"name": "weights & events"})
        meta(pid, 0, "thread_sort_index", {"sort_index": 0})
        for s in range(1, int(max_slot.get(i, 0)) + 1):
            meta(pid, s, "thread_name", {"name": f"slot {s}"})
            meta(pid, s, "thread_sort_index", {"sort_index": s})

    cols = {c: seg[c].to_numpy() for c in seg.columns}
    for k in range(len(seg)):
        v = int(cols["version"][k])
        out.append({
            "ph": "X", "name": f"v{v}", "cat": "trajectory", "pid": INSTANCE_PID0 + int(cols["instance"][k]),
            "tid": int(slot[k]), "ts": _us(cols["t0"][k]), "dur": _dur(cols["t0"][k], cols["t1"][k]),
            "args": {"trajectory": int(cols["trajectory"][k]), "prompt_id": int(cols["prompt_id"][k]), "version": v,
                     "tokens": int(cols["tokens"][k]), "context_tokens": int(cols["ctx"][k]),
                     "start": str(cols["start"][k]), "end": str(cols["end"][k])},
        })
    tools = tool_calls(df)
    if len(tools):  # each inside its trajectory's segment on that instance, on the segment's slot
        held = pd.DataFrame({"trajectory": cols["trajectory"], "instance": cols["instance"], "s0": cols["t0"],
                             "s1": cols["t1"], "slot": slot})
        m = tools.merge(held, on=["trajectory", "instance"])
        m = m[(m["t0"] >= m["s0"]) & (m["t1"] <= m["s1"])]
        for r in m.itertuples():
            out.append({"ph": "X", "name": "tool call", "cat": "tool", "pid": INSTANCE_PID0 + int(r.instance),
                        "tid": int(r.slot), "ts": _us(r.t0), "dur": _dur(r.t0, r.t1),
                        "args": {"trajectory": int(r.trajectory), "version": int(r.version)}})
    for r in loads(df).itertuples():
        out.append({"ph": "X", "name": f"load v{int(r.version)}", "cat": "weights",
                    "pid": INSTANCE_PID0 + int(r.instance), "tid": 0, "ts": _us(r.t0),
                    "dur": _dur(r.t0, r.t1), "args": {"version": int(r.version), "mode": str(r.mode)}})
    for r in trainer_steps(df).itertuples():
        nv = int(r.version) + 1
        out.append({"ph": "X", "name": f"train \u2192v{nv}", "cat": "trainer", "pid": TRAINER_PID, "tid": 1,
                    "ts": _us(r.t0), "dur": _dur(r.t0, r.t1),
                    "args": {"from_version": int(r.version), "tokens": int(r.tokens),
                             "busy_device_s": float(r.busy_s)}})
        if r.t_pub > r.t1:
            out.append({"ph": "X", "name": f"publish v{nv}", "cat": "trainer", "pid": TRAINER_PID, "tid": 1,
                        "ts": _us(r.t1), "dur": _dur(r.t1, r.t_pub), "args": {"version": nv}})
    t = df["t_s"].to_numpy()
    sel = np.flatnonzero(np.isin(ev, INSTANTS) & (df["instance"].to_numpy() >= 0))
    inst, traj, pidc = df["instance"].to_numpy(), df["trajectory"].to_numpy(), df["prompt_id"].to_numpy()
    ver, tok, det = df["version"].to_numpy(), df["tokens"].to_numpy(), df["detail"].to_numpy()
    for r in sel:
        args = {"trajectory": int(traj[r]), "prompt_id": int(pidc[r]), "version": int(ver[r]), "tokens": int(tok[r])}
        if det[r]:
            args["detail"] = str(det[r])
        out.append({"ph": "i", "s": "t", "name": str(ev[r]), "cat": "event", "pid": INSTANCE_PID0 + int(inst[r]),
                    "tid": 0, "ts": _us(t[r]), "args": args})
    for w in weight_syncs(df).itertuples():
        out.append({"ph": "X", "name": f"weight sync v{int(w.version)}", "cat": "weights", "pid": TRAINER_PID,
                    "tid": 2, "ts": _us(w.t0), "dur": _dur(w.t0, w.t1),
                    "args": {"version": int(w.version), "bytes": int(w.bytes), "detail": w.detail}})
    for r in np.flatnonzero(ev == "publish"):
        out.append({"ph": "i", "s": "p", "name": f"published v{int(ver[r])}", "cat": "trainer", "pid": TRAINER_PID,
                    "tid": 1, "ts": _us(t[r]), "args": {"version": int(ver[r])}})
    body = [e for e in out if e["ph"] != "M"]
    body.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0.0)))
    other = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in run.items()}
    return {"traceEvents": [e for e in out if e["ph"] == "M"] + body, "displayTimeUnit": "ms",
            "otherData": {"source": "dora event log", **other}}


def check_output(path: str | Path) -> Path:
    """Refuse an output path before any work (dora.io.check_output; a trace-event file is .json)."""
    return io.check_output(path, ("json",), example="trace.json")


def write_perfetto(df: pd.DataFrame, path: str | Path) -> Path:
    """Write the event log as trace-event JSON (atomically: a temp file renamed into place)."""
    p = check_output(path)
    doc = trace_events(df)
    io.write_text(p, json.dumps(doc, separators=(",", ":"), allow_nan=False))  # dumps (C encoder): 10x faster
    return p


def write_perfetto_runs(logs, out: str | Path) -> list[Path]:
    """What `--perfetto OUT.json` writes for the runs of one CLI call (dict policy -> log, or a list):
    one run -> OUT.json; several -> OUT.<policy>.json each (like --events). Returns the paths."""

    runs = label_runs(logs)
    p = check_output(out)
    if len(runs) == 1:
        return [write_perfetto(runs[0][1], p)]
    return [write_perfetto(df, p.with_name(f"{p.stem}.{name.splitlines()[0].replace(' ', '_').replace('#', '')}.json"))
            for name, df in runs]


def main(argv: list[str] | None = None) -> int:
    """python -m dora.perfetto EVENTS.parquet OUT.json"""
    import sys

    from dora.errors import ArgumentParser, cli_errors
    from dora.eventlog import read_events

    ap = ArgumentParser(prog="python -m dora.perfetto", description="Write an event log as "
                                 "Chrome/Perfetto trace-event JSON (open in ui.perfetto.dev).")
    ap.add_argument("events", help="event log parquet (python -m dora.sim ... --events OUT.parquet)")
    ap.add_argument("out", help="output JSON")
    args = ap.parse_args(argv)
    with cli_errors("dora.perfetto"):
        check_output(args.out)
        p = write_perfetto(read_events(args.events), args.out)
        print(f"wrote {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
