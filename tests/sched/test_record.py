"""The `sched` row codec: every event a body delivers comes back equal from its JSON."""

import json

from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.costs import DecodeCost, TrainCost
from dora.sched.record import decode_event, encode

EVENTS = [
    E.ClusterStarted((E.InstanceSpec(0, 8, 1000, 2), E.InstanceSpec(1, 8, 1000, 2, True)), 4, 0, DecodeCost(), False,
                     True, TrainCost(3.0, 7e-5, 0.65, 31.2), 7),
    E.GroupsSampled((E.GroupSpec(5, 4, 100),)), E.KVRead((0, 1), (10, 0)), E.TrajectoryFinished(3, 1, 77),
    E.TrajectoryLost(3, 1, "instance failure"), E.ToolCallStarted(3, 1), E.ToolCallEnded(3, 1, 12),
    E.MigrationDone(3, 0, 1), E.WeightsLoaded(1, 2), E.VersionPublished(2), E.InstanceReturned(1, 2),
    E.InstanceFailed(0), E.InstanceRecovered(0, 2),
]


def test_every_event_round_trips():
    assert {type(e) for e in EVENTS} == set(E.Event.__args__)
    for ev in EVENTS:
        row = json.loads(encode(ev, [A.LendInstance(1), A.ReturnInstance(1)]))
        assert decode_event(row["in"]) == ev
        assert row["out"] == [{"type": "LendInstance", "instance": 1}, {"type": "ReturnInstance", "instance": 1}]
