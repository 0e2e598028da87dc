"""The body contract: what the simulator (`dora.sim.cluster.Cluster`) and the executor
(`dora.exec.orchestrator.Orchestrator`) share below them.

A body carries out a policy's actions and reports back with events. `Body.apply` is the one
table from action to effect. Three effects are the same in both bodies and live here: sampling
(draw groups, log a `sample` row each, answer `GroupsSampled`), regeneration (a `regenerate`
row; the policy has aborted the group's trajectories already) and reading KV use (answer
`KVRead`). The others are each body's own: `_dispatch`, `_migrate`, `_abort`, `_load`,
`_train`. `run_info` is the run description both bodies give the event log and the metrics;
`close_log` writes the rows that end a run; `RunResult` is what a run returns (the executor's
adds its trained trajectories, per-step rows and profile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from dora.sched import actions as A
from dora.sched import events as E

if TYPE_CHECKING:
    from dora.eventlog import EventLog
    from dora.sched.state import ClusterView


@mypyc_attr(allow_interpreted_subclasses=True)  # the executor's orchestrator is plain Python
class Body:
    __slots__ = ()

    # ---- what each body provides ------------------------------------------------------------------
    def now(self) -> float:
        """The body's time now (simulated or wall seconds since the run began)."""
        raise NotImplementedError

    def event_log(self) -> EventLog:
        raise NotImplementedError

    def deliver(self, ev: E.Event) -> None:
        """Hand an event to the policy and apply the actions it returns."""
        raise NotImplementedError

    def draw(self, count: int) -> list[E.GroupSpec]:
        """The next `count` prompt groups of the run's data."""
        raise NotImplementedError

    def group_size(self) -> int:
        raise NotImplementedError

    def kv_in_use(self, instances: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def _dispatch(self, a: A.Dispatch, now: float) -> None:
        raise NotImplementedError

    def _migrate(self, a: A.Migrate, now: float) -> None:
        raise NotImplementedError

    def _abort(self, a: A.Abort, now: float) -> None:
        raise NotImplementedError

    def _load(self, a: A.LoadVersion, now: float) -> None:
        raise NotImplementedError

    def _train(self, a: A.Train, now: float) -> None:
        raise NotImplementedError

    # ---- the table ----------------------------------------------------------------------------------
    def apply(self, a: A.Action) -> None:
        now = self.now()
        t = type(a)
        if t is A.Dispatch:
            self._dispatch(a, now)  # type: ignore[arg-type]
        elif t is A.SampleGroups:
            self._sample(a, now)  # type: ignore[arg-type]
        elif t is A.Train:
            self._train(a, now)  # type: ignore[arg-type]
        elif t is A.LoadVersion:
            self._load(a, now)  # type: ignore[arg-type]
        elif t is A.Migrate:
            self._migrate(a, now)  # type: ignore[arg-type]
        elif t is A.Abort:
            self._abort(a, now)  # type: ignore[arg-type]
        elif t is A.RegenerateGroup:
            self._regenerate(a, now)  # type: ignore[arg-type]
        elif t is A.ReadKV:
            self.deliver(E.KVRead(a.instances, self.kv_in_use(a.instances)))  # type: ignore[union-attr]
        else:
            raise TypeError(f"unknown action {a!r}")

    # ---- the effects both bodies share --------------------------------------------------------------
    def _sample(self, a: A.SampleGroups, now: float) -> None:
        groups = self.draw(a.count)
        log = self.event_log()
        for g in groups:
            log.add(now, "sample", prompt_id=g.prompt_id, tokens=g.group_size, detail=a.reason)
        self.deliver(E.GroupsSampled(tuple(groups)))

    def _regenerate(self, a: A.RegenerateGroup, now: float) -> None:
        self.event_log().add(now, "regenerate", prompt_id=a.prompt_id, tokens=self.group_size(), detail=a.reason)

    def close_log(self, view: ClusterView, now: float, trainer_version: int) -> None:
        """The rows that end a run: a `leftover` row per group the scheduler still holds, `run_end`."""
        log = self.event_log()
        for tid, pid, version, size, state in view.leftovers():
            log.add(now, "leftover", traj=tid, prompt_id=pid, version=version, tokens=size, detail=state)
        log.add(now, "run_end", trainer_version=trainer_version)


@mypyc_attr(native_class=False)  # a plain dataclass: the executor's result extends it
@dataclass
class RunResult:
    """One policy's run: its name, its config as run, its metrics and its event log (a DataFrame)."""

    policy: str
    config: dict
    metrics: dict
    events: Any


def run_info(body: str, policy: str, eta: int, batch_size: int, group_size: int, steps: int, instances: int,
             devices_per_instance: int, rollout_devices: int, trainer_devices: int, colocated: bool,
             elastic_instances: list[int], max_seqs: int, **extra: Any) -> dict[str, Any]:
    """What a run is, for its event log (`EventLog(run_info)`) and `dora.metrics`: the same keys
    from both bodies, plus the body's own (`extra`: the trace or the model, KV tokens, backend)."""
    first: dict[str, Any] = {k: extra.pop(k) for k in ("trace", "model") if k in extra}  # what it ran on, first
    return {"policy": policy, **first, "eta": eta, "batch_size": batch_size, "group_size": group_size,
            "steps": steps, "instances": instances, "devices_per_instance": devices_per_instance,
            "rollout_devices": rollout_devices, "trainer_devices": trainer_devices, "colocated": colocated,
            "elastic_instances": elastic_instances, "max_seqs": max_seqs, **extra, "body": body}
