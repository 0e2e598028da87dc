"""Policy base class: turns events into actions over a shared ClusterView.

A policy owns no clock and no threads: `handle(event, now)` updates the view, calls the
policy's hooks, and returns the actions the hooks emitted, in order. The same object fed
the same events makes the same decisions in the simulator and the executor.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable

from mypy_extensions import mypyc_attr

from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.config import PolicyConfig
from dora.sched.costs import TrainCost
from dora.sched.state import (
    G_COMPLETE,
    G_RUNNING,
    G_TRAINED,
    G_TRAINING,
    MIGRATING,
    QUEUED_OR_RUNNING,
    ClusterView,
    GroupView,
    InstView,
)


@mypyc_attr(allow_interpreted_subclasses=True)
class Policy:
    """Subclasses set `name` and override the `on_*` hooks they need."""

    name: ClassVar[str] = "base"
    #: "disaggregated" (separate trainer devices) or "colocated" (time-share all devices)
    placement: str = "disaggregated"
    #: disaggregated, but the trainer's devices also run rollout instances while it waits for data
    elastic: bool = False
    #: disaggregated, and rollout instances may be lent to the trainer (where the body can lend)
    lends: bool = False

    def __init__(self, cfg: PolicyConfig):
        self.cfg = cfg
        self.B = cfg.batch_size
        self.G = cfg.group_size
        self.eta = cfg.eta
        self.view = ClusterView()
        self._out: list[A.Action] = []
        self._training: list[GroupView] = []
        self.now = 0.0
        self._kv_wanted: set[int] = set()
        self.kv_migration = True  # the body can move a KV cache (ClusterStarted says)
        self.run_steps = 0  # trainer steps the run takes (ClusterStarted; 0: not known)
        self.can_lend = False  # the body can lend instances to the trainer, and gave its step model
        self.train_cost: TrainCost | None = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            E.ClusterStarted: self._cluster_started,
            E.GroupsSampled: self._groups_sampled,
            E.KVRead: self._kv_read,
            E.TrajectoryFinished: self._traj_finished,
            E.TrajectoryLost: self._traj_lost,
            E.ToolCallStarted: self._tool_started,
            E.ToolCallEnded: self._tool_ended,
            E.MigrationDone: self._migration_done,
            E.WeightsLoaded: self._weights_loaded,
            E.VersionPublished: self._version_published,
            E.InstanceReturned: self._instance_returned,
            E.InstanceFailed: self._instance_failed,
            E.InstanceRecovered: self._instance_recovered,
        }

    # ---- entry point ---------------------------------------------------------------------------
    def handle(self, event: E.Event, now: float) -> list[A.Action]:
        self.now = now
        self._out = []
        self._handlers[type(event)](event)
        if self._kv_wanted:
            self._out.append(A.ReadKV(tuple(sorted(self._kv_wanted))))
            self._kv_wanted = set()
        return self._out

    def config_dict(self) -> dict:
        """Effective policy knobs (for --json config)."""
        from dataclasses import asdict

        section = getattr(self.cfg, self.name, None)
        out = {"eta": self.eta, "batch_size": self.B, "group_size": self.G, "placement": self.placement}
        if section is not None:
            out.update(asdict(section))
        return out

    # ---- hooks (override) ----------------------------------------------------------------------
    def on_start(self) -> None: ...
    def on_groups(self, groups: list[GroupView], reason: str) -> None: ...
    def on_kv(self, used: dict[int, int]) -> None: ...
    def on_finished(self, traj: int, inst: InstView, group_done: GroupView | None) -> None: ...
    def on_loaded(self, inst: InstView, version: int) -> None: ...
    def on_published(self, version: int) -> None: ...
    def on_migrated(self, traj: int, src: int, dst: int) -> None: ...
    def on_tool_call(self, traj: int, inst: int, tokens: int) -> None:
        """A trajectory's tool call started on `inst` (tokens -1) or ended (its output tokens)."""
    def on_trainer_idle(self) -> None:
        """After a publication, when no next step could start: the trainer waits for data."""

    def on_lost(self, traj: int, inst: int) -> None:
        """Default: the group is abandoned and regenerated on the newest version."""
        t = self.view.trajs[traj]
        g = self.view.groups[t.prompt_id]
        if g.state == G_RUNNING and traj in g.trajs:
            self.regenerate(g, "lost")

    def on_instance_failed(self, inst: InstView, was_loading: int) -> None:
        """`inst` died (its trajectories follow as TrajectoryLost events); `was_loading` is the
        version it was asked to load, or -1: that load will never complete."""

    def on_instance_recovered(self, inst: InstView) -> None:
        """`inst` is back, empty, holding `inst.versions`."""

    def index_instance(self, inst: InstView) -> None:
        """An instance's versions, loading state or liveness changed (policies keeping indexes
        of the cluster update them here; called before the policy's own hook)."""

    def index_all(self) -> None:
        """The newest version or the trainer's state changed: re-derive every index."""

    def ready_batch(self) -> list[GroupView] | None:
        """Groups for the next trainer step, or None to wait. Default: first B complete (FIFO)."""
        if len(self.view.buffer) < self.B:
            return None
        it = iter(self.view.buffer.values())
        return [next(it) for _ in range(self.B)]

    def overdue(self, inflight: Iterable[GroupView]) -> list[GroupView]:
        """In-flight groups whose deadline is the current step (version + η = trainer version):
        they had to be in this step's batch, so no batch can train now without dropping them.
        `inflight` must be in start order (versions ascending), as the policies keep it; this
        is the cheap test for the common wait, `staleness_excess` finds the same groups."""
        last = self.view.trainer_version - self.eta
        out = []
        for g in inflight:
            if g.version > last:
                break
            if g.state == G_RUNNING:
                out.append(g)
        return out

    def any_overdue(self, inflight: Iterable[GroupView]) -> bool:
        """`bool(self.overdue(inflight))`, stopping at the first overdue group."""
        last = self.view.trainer_version - self.eta
        for g in inflight:
            if g.version > last:
                return False
            if g.state == G_RUNNING:
                return True
        return False

    def staleness_ok(self, batch: list[GroupView]) -> bool:
        """True when `staleness_excess(batch, <the started, incomplete groups>)` would find
        nothing: by counts per version of the open groups (every k >= 0 must hold the groups
        due within k steps in k batches), in O(versions)."""
        counts: dict[int, int] = {}
        for g in batch:
            counts[g.version] = counts.get(g.version, 0) + 1
        return self.staleness_ok_counts(counts)

    def staleness_ok_counts(self, batch_counts: dict[int, int]) -> bool:
        """`staleness_ok` for a batch given as groups per version."""
        i, eta, B = self.view.trainer_version, self.eta, self.B
        versions = dict(self.view.open_versions)
        for ver, k in batch_counts.items():
            versions[ver] -= k
        seen = 0
        for v in sorted(versions):
            seen += versions[v]
            if seen > max(v + eta - i, 0) * B:
                return False
        return True

    def staleness_excess(self, batch: list[GroupView],
                         inflight: Iterable[GroupView]) -> tuple[list[GroupView], list[GroupView]]:
        """Groups that could no longer be trained within η if `batch` trains now.

        The step trains at trainer version i. A group of version v left untrained must be in
        one of the next v + η - i steps, so for every k >= 0 the groups left with
        v + η - i <= k must fit in k batches of B. Returns (in-flight groups, complete groups)
        to take out for the rest to fit (in-flight ones first): empty lists when training now
        keeps every group within η.
        """
        i, eta, B = self.view.trainer_version, self.eta, self.B
        chosen = {g.prompt_id for g in batch}
        rest = [(g.version + eta - i, 0, g.prompt_id, g) for g in self.view.buffer.values()
                if g.prompt_id not in chosen]
        rest += [(g.version + eta - i, 1, g.prompt_id, g) for g in inflight
                 if g.state == G_RUNNING and g.version >= 0]
        rest.sort(key=lambda r: r[:3])
        kept = 0
        kept_inflight: list[GroupView] = []
        drop_inflight: list[GroupView] = []
        drop_done: list[GroupView] = []
        for d, running, _, g in rest:
            if kept < max(d, 0) * B:
                kept += 1
                if running:
                    kept_inflight.append(g)
            elif running:
                drop_inflight.append(g)
            elif kept_inflight:  # keep the complete group, give up an in-flight one instead
                drop_inflight.append(kept_inflight.pop())
            else:
                drop_done.append(g)
        return drop_inflight, drop_done

    # ---- actions -------------------------------------------------------------------------------
    def sample(self, count: int, reason: str = "batch") -> None:
        if count > 0:
            self._pending_reason = reason
            self._out.append(A.SampleGroups(count, reason))

    def read_kv(self, instances: Iterable[int]) -> None:
        """Ask the body for these instances' KV-cache use; `on_kv` gets it once this event's
        other actions are applied (one ReadKV, last)."""
        self._kv_wanted.update(instances)

    def dispatch(self, g: GroupView, sample_idx: int, inst: InstView, version: int, pred: float = 0.0) -> int:
        t = self.view.new_traj(g, sample_idx, version, inst.id, self.now, pred)
        self._out.append(A.Dispatch(t.id, g.prompt_id, sample_idx, inst.id, version))
        return t.id

    def start_group(self, g: GroupView, version: int, instances: list[InstView], pred: float = 0.0) -> None:
        """Dispatch all G samples of a group under one version; instances[i] runs sample i."""
        v = self.view
        v.open_group(g, version)
        tid = v.new_group_trajs(g, version, instances, self.now, pred)
        out, pid, Dispatch = self._out, g.prompt_id, A.Dispatch
        for i in range(g.size):  # self.dispatch(...) for each sample (hot path)
            out.append(Dispatch(tid + i, pid, i, instances[i].id, version))

    def migrate(self, traj: int, dst: InstView, kv: bool = True) -> None:
        assert self.view.trajs[traj].state == QUEUED_OR_RUNNING, f"policy bug: trajectory {traj} is in transit"
        self.view.move_traj(traj, dst.id)
        self._out.append(A.Migrate(traj, dst.id, kv))

    def abort(self, traj: int, reason: str) -> None:
        self.view.drop_traj(traj)
        self._out.append(A.Abort(traj, reason))

    def regenerate(self, g: GroupView, reason: str) -> None:
        """Abandon the group's current attempt (C2: it will be trained exactly once, later)."""
        live = self.view.abandon_group(g)
        for tid in live:
            self._out.append(A.Abort(tid, reason))
        self._out.append(A.RegenerateGroup(g.prompt_id, reason))
        self.on_regenerate(g)

    def on_regenerate(self, g: GroupView) -> None:
        """Re-dispatch an abandoned group; policies that regenerate override this."""
        raise RuntimeError(f"policy {self.name} abandoned group {g.prompt_id} but cannot regenerate it")

    def load(self, inst: InstView, version: int, mode: str = "drain", evict: int = -1) -> None:
        inst.loading = version
        inst.load_mode = mode
        inst.evict = evict
        self.index_instance(inst)
        self._out.append(A.LoadVersion(inst.id, version, mode, evict))

    def lend(self, inst: InstView) -> None:
        """Lend drained `inst` to the idle trainer (where the body can: `self.can_lend`)."""
        v = self.view
        assert self.can_lend and not v.trainer_busy, "policy bug: lending needs a body that lends and an idle trainer"
        assert inst.alive and not inst.active and inst.loading < 0 and not inst.elastic, \
            f"policy bug: instance {inst.id} is not drained"
        inst.alive = False
        inst.lent = True
        inst.versions = set()
        self.index_instance(inst)
        self._out.append(A.LendInstance(inst.id))

    def take_back(self, inst: InstView) -> None:
        """Take lent `inst` back from the idle trainer; it serves again at InstanceReturned."""
        assert inst.lent and not self.view.trainer_busy, f"policy bug: instance {inst.id} is not lent or trainer busy"
        self._out.append(A.ReturnInstance(inst.id))

    def maybe_train(self) -> None:
        if self.view.trainer_busy:
            return
        batch = self.ready_batch()
        if batch:
            self.train_batch(batch)

    def train_batch(self, batch: list[GroupView]) -> None:
        """Hand complete groups to the trainer."""
        v = self.view
        assert not v.trainer_busy, "policy bug: Train while the trainer is busy"
        trajs: list[int] = []
        for g in batch:
            assert g.state == G_COMPLETE, f"group {g.prompt_id} not complete"
            v.take_for_training(g)
            trajs.extend(v.group_trajs(g))
        v.trainer_busy = True
        self.index_all()
        self._training = batch
        self._out.append(A.Train(tuple(g.prompt_id for g in batch), tuple(trajs)))

    # ---- common bookkeeping ------------------------------------------------------------------
    def _cluster_started(self, ev: E.ClusterStarted) -> None:
        v = self.view
        for spec in ev.instances:
            v.instances[spec.id] = InstView(spec.id, spec.max_seqs, spec.kv_tokens, spec.devices,
                                            versions={ev.version}, elastic=spec.elastic)
        v.trainer_devices = ev.trainer_devices
        self.kv_migration = ev.kv_migration
        self.run_steps = ev.steps
        self.can_lend = ev.lend and ev.train_cost is not None
        self.train_cost = ev.train_cost
        if ev.cost is not None:
            v.cost = ev.cost
        v.trainer_version = v.latest_version = ev.version
        self.index_all()
        self.on_start()

    def _groups_sampled(self, ev: E.GroupsSampled) -> None:
        gs = [self.view.add_group(s.prompt_id, s.group_size, s.prompt_len, self.now) for s in ev.groups]
        if self.G == 0 and gs:
            self.G = gs[0].size
        self.on_groups(gs, getattr(self, "_pending_reason", "batch"))

    def _kv_read(self, ev: E.KVRead) -> None:
        if len(ev.used) != len(ev.instances):
            raise ValueError(f"KVRead has {len(ev.used)} readings for {len(ev.instances)} instances")
        self.on_kv(dict(zip(ev.instances, ev.used)))

    def _traj_finished(self, ev: E.TrajectoryFinished) -> None:
        g = self.view.finish_traj(ev.traj, ev.tokens, self.now)
        self.on_finished(ev.traj, self.view.instances[ev.instance], g)
        if g is not None:  # only a completed group changes what the trainer can take
            self.maybe_train()

    def _traj_lost(self, ev: E.TrajectoryLost) -> None:
        t = self.view.trajs[ev.traj]
        if t.state in (QUEUED_OR_RUNNING, MIGRATING):
            self.view.drop_traj(ev.traj)
            self.on_lost(ev.traj, ev.instance)

    def _tool_started(self, ev: E.ToolCallStarted) -> None:
        if self.view.trajs[ev.traj].state in (QUEUED_OR_RUNNING, MIGRATING):
            self.on_tool_call(ev.traj, ev.instance, -1)

    def _tool_ended(self, ev: E.ToolCallEnded) -> None:
        if self.view.trajs[ev.traj].state in (QUEUED_OR_RUNNING, MIGRATING):
            self.on_tool_call(ev.traj, ev.instance, ev.tokens)

    def _migration_done(self, ev: E.MigrationDone) -> None:
        if self.view.trajs[ev.traj].state == MIGRATING:
            self.view.arrive_traj(ev.traj)
            self.on_migrated(ev.traj, ev.src, ev.dst)

    def _weights_loaded(self, ev: E.WeightsLoaded) -> None:
        inst = self.view.instances[ev.instance]
        if inst.loading == ev.version:
            inst.loading = -1  # (else a newer load was requested while this one ran: still loading)
        if inst.load_mode == "add":
            inst.versions.add(ev.version)
            inst.versions.discard(inst.evict)
        else:
            inst.versions = {ev.version}
        self.index_instance(inst)
        self.on_loaded(inst, ev.version)

    def _version_published(self, ev: E.VersionPublished) -> None:
        v = self.view
        v.trainer_busy = False
        v.trainer_version = v.latest_version = ev.version
        for g in self._training:
            g.state = G_TRAINED
        self._training = []
        self.index_all()
        self.on_published(ev.version)
        self.maybe_train()
        if not v.trainer_busy:
            self.on_trainer_idle()

    def _instance_returned(self, ev: E.InstanceReturned) -> None:
        inst = self.view.instances[ev.instance]
        inst.lent = False
        self._instance_recovered(E.InstanceRecovered(ev.instance, ev.version))

    def _instance_failed(self, ev: E.InstanceFailed) -> None:
        inst = self.view.instances[ev.instance]
        was_loading = inst.loading
        inst.alive = False
        inst.loading = -1
        inst.versions = set()
        self.index_instance(inst)
        self.on_instance_failed(inst, was_loading)

    def _instance_recovered(self, ev: E.InstanceRecovered) -> None:
        inst = self.view.instances[ev.instance]
        inst.alive = True
        inst.versions = {ev.version}
        inst.loading = -1
        self.index_instance(inst)
        self.on_instance_recovered(inst)


def least_loaded(instances: list[InstView], count: int) -> list[InstView]:
    """`count` picks, each to the instance with the fewest active trajectories (ties: lowest id)."""
    import heapq

    heap = [(i.load, i.id, i) for i in instances]
    heapq.heapify(heap)
    out = []
    for _ in range(count):
        load, iid, inst = heapq.heappop(heap)
        out.append(inst)
        heapq.heappush(heap, (load + 1, iid, inst))
    return out


__all__ = ["Policy", "least_loaded", "G_COMPLETE", "G_RUNNING", "G_TRAINED", "G_TRAINING"]
