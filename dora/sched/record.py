"""What the scheduler was told and what it answered, as JSON: for `sched` rows of the event log.

A body that records its run writes one row per delivered event (event name `sched`, `t_s` the
`now` it passed, `detail` = `encode(event, actions)`). `replay` feeds those events to a fresh
policy object and reports every step where its actions differ from the recorded ones: the
same policy code decides the same way in the simulator, the executor and here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.costs import DecodeCost, TrainCost
from dora.sched.policy import Policy

_EVENTS = {c.__name__: c for c in (E.ClusterStarted, E.GroupsSampled, E.KVRead, E.TrajectoryFinished, E.TrajectoryLost,
                                   E.ToolCallStarted, E.ToolCallEnded, E.MigrationDone, E.WeightsLoaded,
                                   E.VersionPublished, E.InstanceReturned, E.InstanceFailed, E.InstanceRecovered)}
_NESTED = {"instances": E.InstanceSpec, "groups": E.GroupSpec}


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {"type": type(obj).__name__, **{f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    return obj


def encode(event: E.Event, actions: Iterable[A.Action]) -> str:
    return json.dumps({"in": _plain(event), "out": [_plain(a) for a in actions]}, separators=(",", ":"))


def decode_event(d: dict) -> E.Event:
    d = dict(d)
    cls = _EVENTS[d.pop("type")]
    for key, sub in _NESTED.items():
        if key in d:  # (KVRead's `instances` are plain ids)
            d[key] = tuple(sub(**{k: v for k, v in x.items() if k != "type"}) if isinstance(x, dict) else x
                           for x in d[key])
    if isinstance(d.get("cost"), dict):
        d["cost"] = DecodeCost(**{k: v for k, v in d["cost"].items() if k != "type"})
    if isinstance(d.get("train_cost"), dict):
        d["train_cost"] = TrainCost(**{k: v for k, v in d["train_cost"].items() if k != "type"})
    for key in ("instances", "used"):
        if key in d and not isinstance(d[key], tuple):
            d[key] = tuple(d[key])
    return cls(**d)


def replay(rows: Iterable[tuple[float, str]], policy: Policy) -> list[str]:
    """Feed recorded (now, detail) rows to `policy`; return a line per step whose actions differ."""
    mismatches = []
    for k, (now, detail) in enumerate(rows):
        rec = json.loads(detail)
        got = [_plain(a) for a in policy.handle(decode_event(rec["in"]), now)]
        if got != rec["out"]:
            mismatches.append(f"step {k} at t={now:.6f} ({rec['in']['type']}): recorded {rec['out'][:3]} "
                              f"replayed {got[:3]}")
    return mismatches


def recorded(df) -> list[tuple[float, str]]:
    """The `sched` rows of an event log (a DataFrame), in the order they were written."""
    rows = df[df["event"].astype(str) == "sched"]
    return list(zip(rows["t_s"].tolist(), rows["detail"].tolist()))
