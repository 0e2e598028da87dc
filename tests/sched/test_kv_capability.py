"""The body says whether a migration can ship the KV cache (ClusterStarted.kv_migration): told
no, the dora policy (with `migrate_kv` on; off by default) still migrates, always with kv=False."""

from __future__ import annotations

import dataclasses

from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.registry import POLICIES
from dora.sim.run import simulate
from tests.conftest import small_config


def _migrations(small, small_trace, monkeypatch, kv_migration: bool) -> list[A.Migrate]:
    seen: list[A.Migrate] = []

    class Told(POLICIES["dora"]):  # (a subclass: compiled classes cannot be monkeypatched)
        def handle(self, event, now):
            if isinstance(event, E.ClusterStarted):
                event = dataclasses.replace(event, kv_migration=kv_migration)
            out = super().handle(event, now)
            seen.extend(a for a in out if isinstance(a, A.Migrate))
            return out

    with monkeypatch.context() as m:
        m.setitem(POLICIES, "dora", Told)
        simulate(small, small_config(small_trace, **{"policy.dora.repartition_load": 0.75,
                                                       "policy.dora.migrate_kv": True}), "dora", progress=False)
    return seen


def test_dora_asks_for_kv_only_where_the_body_can_move_it(small, small_trace, monkeypatch):
    can = _migrations(small, small_trace, monkeypatch, True)
    assert any(a.kv for a in can) and not all(a.kv for a in can)  # (as in test_policies: decided per move)
    cannot = _migrations(small, small_trace, monkeypatch, False)
    assert cannot and not any(a.kv for a in cannot)
