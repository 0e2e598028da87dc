"""The body contract: what the simulator (`dora.sim.cluster.Cluster`) and the executor
(`dora.exec.orchestrator.Orchestrator`) share below them.

A body carries out a policy's actions and reports back with events. `Body.apply` is the one
table from action to effect. Three effects are the same in both bodies and live here: sampling
(draw groups, log a `sample` row each, answer `GroupsSampled`), regeneration (a `regenerate`
row; the policy has aborted the group's trajectories already) and reading KV use (answer
`KVRead`). The others are each body's own: `_dispatch`, `_migrate`, `_abort`, `_load`,
`_train`.

`Tracked` is what a body tracks about one live trajectory (the simulator's `Seq` extends it
with its engine's state). The log rows both bodies write are written here, one function per
kind: a segment's start and end (`start_row`, `end_row`, from a `Tracked`), a trajectory
stopped between segments (`stop_row`), weight loads (`load_row`), instance failures and
recoveries (`instance_row`), the trainer's rows (`train_rows`, `trainer_row`) and, through
`Body`, `sample`, `regenerate`, `leftover` and `run_end`. `run_info` is the run description
both bodies give the event log and the metrics; `RunResult` is what a run returns (the
executor's adds its trained trajectories, per-step rows and profile).
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


class Tracked:
    """What a body tracks about one live trajectory: who it is (`traj`, `prompt_id`,
    `sample_idx`), where it runs (`instance`; -1 while it moves between instances), when it was
    dispatched, and its current segment (its stretch on one instance under one `version`, which
    a pair of log rows covers): when the segment began (`t_start`), the tokens generated before
    it (`before`) and in it (`made`), and its decode-slot and prefill device-seconds (`busy`,
    `prefill_s`; the executor charges its decode share when the segment ends)."""

    __slots__ = ("traj", "prompt_id", "sample_idx", "instance", "version", "t_dispatch", "t_start", "before", "made",
                 "busy", "prefill_s")

    def __init__(self, traj: int, prompt_id: int, sample_idx: int, instance: int, version: int,
                 t_start: float) -> None:
        self.traj = traj
        self.prompt_id = prompt_id
        self.sample_idx = sample_idx
        self.instance = instance
        self.version = version
        self.t_dispatch = t_start
        # the segment's fields as `restart` sets them, assigned here so that mypyc knows every
        # attribute is always set (no per-access check on the simulator's hot path)
        self.t_start = t_start
        self.before = 0
        self.made = 0
        self.busy = 0.0
        self.prefill_s = 0.0

    def tokens(self) -> int:
        """Tokens generated so far."""
        return self.before + self.made

    def restart(self, now: float, instance: int, version: int, before: int) -> None:
        """A new segment of this trajectory begins at `now` on `instance` under `version`, with
        `before` tokens generated so far."""
        self.t_start = now
        self.instance = instance
        self.version = version
        self.before = before
        self.made = 0
        self.busy = 0.0
        self.prefill_s = 0.0

    def follow(self, prev: Tracked) -> None:
        """This (new) record continues `prev`'s trajectory in a new segment (the simulator makes a
        new `Seq` when a trajectory moves or resumes)."""
        self.sample_idx = prev.sample_idx
        self.t_dispatch = prev.t_dispatch
        self.before = prev.before + prev.made


# ---- the rows both bodies write (what each column holds: dora.eventlog) -------------------------------
def start_row(log: EventLog, now: float, event: str, t: Tracked, tokens: int, detail: str = "") -> None:
    """A segment of `t` begins (`dispatch`, `migrate_in`, `resume`); `tokens`: the context it
    starts from (prompt, or prompt and tokens carried)."""
    log.add(now, event, t.instance, t.traj, t.prompt_id, t.version, -1, tokens, detail)


def end_row(log: EventLog, now: float, event: str, t: Tracked, detail: str = "") -> None:
    """The segment of `t` ends (`finish`, `abort`, `migrate_out`, `interrupt`, `lost`, `end`):
    its tokens, length, decode share and prefill."""
    log.add(now, event, t.instance, t.traj, t.prompt_id, t.version, -1, t.made, detail, now - t.t_start, t.busy,
            t.prefill_s)


def stop_row(log: EventLog, now: float, event: str, instance: int, t: Tracked, detail: str) -> None:
    """`t` ends between segments (`abort`, `lost`: while it moves, or waits for its instance's
    reload): no segment is open, so no tokens or time."""
    log.add(now, event, instance, t.traj, t.prompt_id, t.version, detail=detail)


def load_row(log: EventLog, now: float, event: str, instance: int, version: int, detail: str,
             dur_s: float = 0.0) -> None:
    """A weight load on `instance` starts, ends or fails (`load_start`, `load_end`, `load_fail`);
    `detail`: its mode (and the failure); `dur_s`: its length, at the end."""
    log.add(now, event, instance, version=version, detail=detail, dur_s=dur_s)


def instance_row(log: EventLog, now: float, event: str, instance: int, version: int = -1, detail: str = "",
                 dur_s: float = 0.0, tokens: int = 0) -> None:
    """An instance fails (`fail`, `detail`: why) or is back holding `version` (`recover`); is lent
    to the trainer (`lend`, `tokens`: its devices) or serves again after it (`return`, `dur_s`:
    the reshard that gave it `version`)."""
    log.add(now, event, instance, version=version, tokens=tokens, detail=detail, dur_s=dur_s)


def train_rows(log: EventLog, now: float, trainer_version: int, trajs: list[tuple[int, int, int, int, int]],
               tokens: int) -> None:
    """A trainer step starts: a `train` row per consumed trajectory, given as (traj, prompt_id,
    the version that generated it, its trained tokens, its response tokens; the row holds the
    response tokens), then `train_start` (`tokens`: all trained tokens)."""
    code = log.code("train")
    log.extend([(now, code, -1, traj, pid, ver, trainer_version, rtok, 0.0, 0.0, 0.0)
                for traj, pid, ver, _, rtok in trajs])
    log.add(now, "train_start", trainer_version=trainer_version, tokens=tokens)


def trainer_row(log: EventLog, now: float, event: str, trainer_version: int, version: int = -1, tokens: int = 0,
                dur_s: float = 0.0, busy_s: float = 0.0, detail: str = "") -> None:
    """The trainer's other rows: `train_end` (the step's compute), `publish` (`version` ready for
    rollout), `trainer_restart` (`detail`: where it was)."""
    log.add(now, event, version=version, trainer_version=trainer_version, tokens=tokens, dur_s=dur_s, busy_s=busy_s,
            detail=detail)


def weight_sync_row(log: EventLog, now: float, event: str, version: int, nbytes: int = 0, dur_s: float = 0.0,
                    detail: str = "") -> None:
    """A weight sync of `version` to the engines starts or ends (`weight_sync_start`,
    `weight_sync_end`): `tokens` holds the bytes sent (once; every member received them), `dur_s`
    its length, `detail` how and to which instances."""
    log.add(now, event, version=version, trainer_version=version, tokens=nbytes, detail=detail, dur_s=dur_s)


@mypyc_attr(allow_interpreted_subclasses=True)  # the executor's orchestrator is plain Python
class Body:
    __slots__ = ("log",)
    log: EventLog  # the run's event log

    # ---- what each body provides ------------------------------------------------------------------
    def now(self) -> float:
        """The body's time now (simulated or wall seconds since the run began)."""
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

    def _lend(self, a: A.LendInstance, now: float) -> None:
        raise RuntimeError(f"policy bug: lent instance {a.instance} to the trainer, but this body cannot lend "
                           "(ClusterStarted.lend is false)")

    def _take_back(self, a: A.ReturnInstance, now: float) -> None:
        raise RuntimeError(f"policy bug: took back instance {a.instance}, but this body cannot lend "
                           "(ClusterStarted.lend is false)")

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
        elif t is A.LendInstance:
            self._lend(a, now)  # type: ignore[arg-type]
        elif t is A.ReturnInstance:
            self._take_back(a, now)  # type: ignore[arg-type]
        elif t is A.ReadKV:
            self.deliver(E.KVRead(a.instances, self.kv_in_use(a.instances)))  # type: ignore[union-attr]
        else:
            raise TypeError(f"unknown action {a!r}")

    # ---- the effects both bodies share --------------------------------------------------------------
    def _sample(self, a: A.SampleGroups, now: float) -> None:
        groups = self.draw(a.count)
        log = self.log
        for g in groups:
            log.add(now, "sample", prompt_id=g.prompt_id, tokens=g.group_size, detail=a.reason)
        self.deliver(E.GroupsSampled(tuple(groups)))

    def _regenerate(self, a: A.RegenerateGroup, now: float) -> None:
        self.log.add(now, "regenerate", prompt_id=a.prompt_id, tokens=self.group_size(), detail=a.reason)

    def close_log(self, view: ClusterView, now: float, trainer_version: int) -> None:
        """The rows that end a run: a `leftover` row per group the scheduler still holds, `run_end`."""
        log = self.log
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
