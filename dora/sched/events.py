"""Events: what a body (simulator or executor) tells the scheduler.

Every event is a small record, never changed after it is made (plain slotted dataclasses,
not frozen ones: those cost 3-4x more to build, which counts at a million events per run).
A body calls `Policy.handle(event, now)` once per event, in time order; `now` is the body's
clock in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from dora.sched.costs import DecodeCost, TrainCost


@dataclass(slots=True)
class InstanceSpec:
    """One rollout instance as the scheduler sees it."""

    id: int
    max_seqs: int  # decode slots (max concurrent sequences)
    kv_tokens: int  # KV-cache capacity in tokens
    devices: int = 1
    elastic: bool = False  # runs on trainer devices: usable for rollout only while the trainer waits


@dataclass(slots=True)
class ClusterStarted:
    """First event of a run: the cluster's shape, the initial policy version and the costs the
    body knows (None: the scheduler's defaults, scaled by what it learns). `kv_migration`: a
    migration can ship the KV cache (False: every Migrate must have kv=False). `lend`: the body
    can lend drained rollout instances to the trainer (`LendInstance`; False: it cannot), whose
    step model is `train_cost` (None: not given). `steps`: the trainer steps the run takes (0: not
    known; the run is taken to go on)."""

    instances: tuple[InstanceSpec, ...]
    trainer_devices: int
    version: int = 0  # weights loaded everywhere at t=0
    cost: DecodeCost | None = None
    kv_migration: bool = True
    lend: bool = False
    train_cost: TrainCost | None = None
    steps: int = 0


@dataclass(slots=True)
class GroupSpec:
    prompt_id: int
    group_size: int
    prompt_len: int


@dataclass(slots=True)
class GroupsSampled:
    """Answer to SampleGroups: fresh prompt groups from the dataset, in order."""

    groups: tuple[GroupSpec, ...]


@dataclass(slots=True)
class KVRead:
    """Answer to ReadKV: KV-cache tokens held now on each instance asked for, in the order asked
    (running sequences only; a failed instance holds 0)."""

    instances: tuple[int, ...]
    used: tuple[int, ...]


@dataclass(slots=True)
class TrajectoryFinished:
    """A trajectory produced its last token. `tokens` is its whole response length."""

    traj: int
    instance: int
    tokens: int


@dataclass(slots=True)
class TrajectoryLost:
    """A trajectory stopped without finishing (instance failure). Its tokens are lost."""

    traj: int
    instance: int
    reason: str


@dataclass(slots=True)
class ToolCallStarted:
    """A multi-turn trajectory ended a turn and waits for a tool call: it decodes nothing until
    the call ends (its KV may stay on the instance)."""

    traj: int
    instance: int


@dataclass(slots=True)
class ToolCallEnded:
    """The tool call is back; its output (`tokens`) joins the context and the next turn queues."""

    traj: int
    instance: int
    tokens: int


@dataclass(slots=True)
class MigrationDone:
    """A migrated trajectory arrived at `dst` and is queued there."""

    traj: int
    src: int
    dst: int


@dataclass(slots=True)
class WeightsLoaded:
    instance: int
    version: int


@dataclass(slots=True)
class VersionPublished:
    """The trainer finished a step and published `version`; the trainer is idle again."""

    version: int


@dataclass(slots=True)
class InstanceReturned:
    """A lent instance left the trainer (`ReturnInstance`) and serves again, empty, holding `version`."""

    instance: int
    version: int


@dataclass(slots=True)
class InstanceFailed:
    instance: int


@dataclass(slots=True)
class InstanceRecovered:
    instance: int
    version: int  # weights it came back with


Event = (
    ClusterStarted | GroupsSampled | KVRead | TrajectoryFinished | TrajectoryLost | ToolCallStarted
    | ToolCallEnded | MigrationDone
    | WeightsLoaded | VersionPublished | InstanceReturned | InstanceFailed | InstanceRecovered
)
