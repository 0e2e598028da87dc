"""Trace-event export: the JSON is valid trace-event format and matches the event log."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from dora.eventlog import EventLog, read_events, write_events
from dora.errors import InputError
from dora.perfetto import (INSTANCE_PID0, TRAINER_PID, main as perfetto_main, trace_events, write_perfetto,
                           write_perfetto_runs)
from dora.analysis import event_names, segments
from tests.event_logs import POLICIES
PHASE_KEYS = {  # required keys per phase (Trace Event Format, Google doc "Trace Event Format")
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "M": {"name", "ph", "pid", "args"},
}
METADATA_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index", "process_labels"}


def validate(doc: dict) -> list[str]:
    """Problems with a trace-event document (empty list: valid)."""
    errs = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    if doc.get("displayTimeUnit") not in (None, "ms", "ns"):
        errs.append(f"displayTimeUnit {doc.get('displayTimeUnit')!r}")
    last: dict[tuple[int, int], float] = {}
    open_until: dict[tuple[int, int], list[float]] = defaultdict(list)
    for k, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        if ph not in PHASE_KEYS:
            errs.append(f"event {k}: unknown phase {ph!r}")
            continue
        missing = PHASE_KEYS[ph] - set(e)
        if missing:
            errs.append(f"event {k}: {ph} lacks {sorted(missing)}")
            continue
        if not isinstance(e["name"], str) or not e["name"]:
            errs.append(f"event {k}: name {e['name']!r} is not a non-empty string")
        if type(e["pid"]) is not int or type(e.get("tid", 0)) is not int:
            errs.append(f"event {k}: pid/tid must be ints")
        if ph == "M":
            if e["name"] not in METADATA_NAMES:
                errs.append(f"event {k}: unknown metadata {e['name']!r}")
            continue
        ts = e["ts"]
        if not isinstance(ts, (int, float)) or not np.isfinite(ts) or ts < 0:
            errs.append(f"event {k}: ts {ts!r}")
            continue
        track = (e["pid"], e["tid"])
        if ts < last.get(track, -1.0):
            errs.append(f"event {k}: ts goes back on track {track}")
        last[track] = ts
        if ph == "X":
            d = e["dur"]
            if not isinstance(d, (int, float)) or not np.isfinite(d) or d < 0:
                errs.append(f"event {k}: dur {d!r}")
                continue
            # complete events on one track must nest: each starts after the previous one ended, or inside it
            stack = open_until[track]
            while stack and stack[-1] <= ts + 1e-6:
                stack.pop()
            if stack and ts + d > stack[-1] + 1e-6:
                errs.append(f"event {k}: slice [{ts}, {ts + d}] overlaps its parent on {track} without nesting")
            stack.append(ts + d)
        if ph == "i" and e["s"] not in ("g", "p", "t"):
            errs.append(f"event {k}: instant scope {e['s']!r}")
        if "args" in e and not isinstance(e["args"], dict):
            errs.append(f"event {k}: args must be an object")
    return errs


@pytest.mark.parametrize("policy", POLICIES)
def test_document_validates(policy_logs, policy, tmp_path):
    out = write_perfetto(policy_logs[policy], tmp_path / "t.json")
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert validate(doc) == []
    assert doc["displayTimeUnit"] == "ms"


@pytest.mark.parametrize("policy", POLICIES)
def test_counts_match_event_log(policy_logs, policy):
    df = policy_logs[policy]
    doc = trace_events(df)
    evs = doc["traceEvents"]
    ev = event_names(df)
    seg, orphans = segments(df)
    cats = Counter((e["ph"], e.get("cat")) for e in evs)
    assert cats[("X", "trajectory")] == len(seg)  # one slice per segment
    assert cats[("X", "weights")] == int((ev == "load_end").sum())
    assert sum(1 for e in evs if e["ph"] == "X" and e["name"].startswith("train")) == int((ev == "train_end").sum())
    for name in ("migrate_out", "migrate_in", "interrupt", "abort", "preempt"):
        n = sum(1 for e in evs if e["ph"] == "i" and e["name"] == name)
        assert n == int(((ev == name) & (df["instance"].to_numpy() >= 0)).sum()), name
    assert sum(1 for e in evs if e["ph"] == "i" and e["name"].startswith("published")) == int((ev == "publish").sum())
    # every instance is a named process; every thread that carries events is named
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in evs if e["ph"] != "M"}
    assert used <= named
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[TRAINER_PID] == "trainer"
    for i in set(df["instance"].to_numpy()[df["instance"].to_numpy() >= 0].tolist()):
        assert procs[INSTANCE_PID0 + i] == f"instance {i}"


def test_slices_carry_the_segments(policy_logs):
    df = policy_logs["dora"]
    doc = trace_events(df)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == "trajectory"]
    seg, _ = segments(df)
    got = sorted((e["args"]["trajectory"], round(e["ts"]), e["args"]["version"], e["args"]["tokens"]) for e in xs)
    want = sorted((int(r.trajectory), round(r.t0 * 1e6), int(r.version), int(r.tokens)) for r in seg.itertuples())
    assert got == want
    for e in xs:
        assert e["name"] == f"v{e['args']['version']}"
        assert e["pid"] - INSTANCE_PID0 in set(seg["instance"].tolist())
    # slots never exceed the peak number of trajectories an instance holds at once
    for inst, g in seg.groupby("instance"):
        t = np.concatenate([g["t0"].to_numpy(), g["t1"].to_numpy()])
        d = np.concatenate([np.ones(len(g)), -np.ones(len(g))])
        order = np.lexsort((d, t))  # ends before starts at the same instant
        peak = int(np.cumsum(d[order]).max())
        tids = {e["tid"] for e in xs if e["pid"] == INSTANCE_PID0 + inst}
        assert max(tids) == peak


def test_hand_log_exact():
    log = EventLog({"policy": "hand", "instances": 1, "devices_per_instance": 1, "rollout_devices": 1,
                    "trainer_devices": 1, "max_seqs": 2, "body": "sim"})
    log.add(0.0, "dispatch", 0, 0, 7, 0, tokens=5)
    log.add(0.5, "dispatch", 0, 1, 7, 0, tokens=5)
    log.add(1.0, "migrate_out", 0, 0, 7, 0, tokens=3, detail="to 1", dur_s=1.0)
    log.add(1.0, "migrate_in", 1, 0, 7, 0, tokens=8, detail="from 0 kv")
    log.add(2.5, "finish", 1, 0, 7, 0, tokens=4, dur_s=1.5)
    log.add(3.0, "finish", 0, 1, 7, 0, tokens=9, dur_s=2.5)
    log.add(3.0, "load_start", 0, version=1, detail="drain")
    log.add(4.0, "load_end", 0, version=1, detail="drain", dur_s=1.0)
    log.add(3.0, "train_start", trainer_version=0, tokens=20)
    log.add(5.0, "train_end", trainer_version=0, tokens=20, dur_s=2.0, busy_s=2.0)
    log.add(5.25, "publish", version=1, trainer_version=1, dur_s=0.25)
    log.add(6.0, "run_end", trainer_version=1)
    doc = trace_events(log.to_frame())
    assert validate(doc) == []
    xs = {(e["pid"], e["tid"], e["name"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert xs == {
        (100, 1, "v0", 0.0, 1e6), (100, 2, "v0", 5e5, 2.5e6), (101, 1, "v0", 1e6, 1.5e6),
        (100, 0, "load v1", 3e6, 1e6), (1, 1, "train \u2192v1", 3e6, 2e6), (1, 1, "publish v1", 5e6, 2.5e5),
    }
    inst = [(e["pid"], e["name"], e["ts"]) for e in doc["traceEvents"] if e["ph"] == "i"]
    assert (100, "migrate_out", 1e6) in inst and (101, "migrate_in", 1e6) in inst


def test_cli(policy_logs, tmp_path, capsys):
    ev = tmp_path / "ev.parquet"
    write_events(policy_logs["partial"], ev)
    out = tmp_path / "t.json"
    assert perfetto_main([str(ev), str(out)]) == 0
    assert validate(json.loads(out.read_text())) == []
    assert trace_events(read_events(ev))["traceEvents"] == json.loads(out.read_text())["traceEvents"]
    with pytest.raises(SystemExit) as e:
        perfetto_main([str(tmp_path / "missing.parquet"), str(tmp_path / "x.json")])
    assert e.value.code == 2 and "file not found" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_write_runs_names_files_like_events(policy_logs, tmp_path):
    paths = write_perfetto_runs(policy_logs, tmp_path / "t.json")
    assert sorted(p.name for p in paths) == sorted(f"t.{name}.json" for name in POLICIES)
    for p in paths:
        assert validate(json.loads(p.read_text())) == []
    one = write_perfetto_runs({"dora": policy_logs["dora"]}, tmp_path / "one.json")
    assert [p.name for p in one] == ["one.json"]
    with pytest.raises(InputError, match="use .json"):
        write_perfetto_runs(policy_logs, tmp_path / "t.png")
    with pytest.raises(InputError, match="is a directory"):
        write_perfetto(policy_logs["sync"], tmp_path)


def test_tool_calls_nest_in_their_segment(agentic_logs):
    df = agentic_logs["dora"]
    doc = trace_events(df)
    assert validate(doc) == []
    tools = [e for e in doc["traceEvents"] if e.get("cat") == "tool"]
    n_start = int((event_names(df) == "tool_start").sum())
    assert 0.8 * n_start <= len(tools) <= n_start
    segs = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("cat") == "trajectory":
            segs[(e["pid"], e["tid"], e["args"]["trajectory"])].append(_ns_span(e))
    for e in tools:
        a0, b0 = _ns_span(e)
        spans = segs[(e["pid"], e["tid"], e["args"]["trajectory"])]
        assert any(a <= a0 and b0 <= b for a, b in spans), (e, spans)


def _ns_span(e: dict) -> tuple[int, int]:
    a = round(e["ts"] * 1000)
    return a, a + round(e["dur"] * 1000)
