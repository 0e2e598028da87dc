"""The simulated cluster: SimPy clock, instances, trainer, dataset; applies the policy's actions.

Events at the same instant are processed in a fixed order (instance boundaries by id, then
same-instant re-plans, then weight loads, then trainer events), so a run does not depend on
the order in which SimPy happened to schedule them.
"""

from __future__ import annotations

import gc
import heapq
from array import array
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import simpy

from dora.body import Body, end_row, instance_row, start_row, stop_row
from dora.errors import InputError
from dora.eventlog import EventLog
from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.policy import Policy
from dora.sim.cost import CostModel
from dora.sim.faults import FaultConfig, FaultDraws
from dora.sim.imbalance import ImbalanceProcess
from dora.sim.instance import ABORT, GONE, MIGRATE, Instance, Seq, Stop
from dora.sim.order import ARRIVAL, BOUNDARY, FAULT, TRAINER
from dora.sim.trainer import Trainer
from dora.sim.weightsync import WeightSync, WeightSyncConfig
from dora.trace import Trace

_KIND_STRIDE = 1 << 20


class _Call:
    """A SimPy queue entry, fired at an absolute time (no delay arithmetic): SimPy's step calls
    each of `callbacks` with the entry (reading only `callbacks` and `_ok`). An instance boundary
    passes its bound `_boundary`, made once, and its token as `arg`: no closure per event."""

    __slots__ = ("callbacks", "arg", "_ok")

    def __init__(self, callbacks: tuple | None, arg: int) -> None:
        self.callbacks = callbacks  # SimPy sets it to None once the event is processed
        self.arg = arg
        self._ok = True


class Dataset:
    """Prompt groups in trace order; past the end it starts another epoch with fresh ids."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.G = trace.group_size
        self.n = trace.num_groups
        self.pids = trace.group_prompt_ids()
        self.span = int(self.pids.max()) + 1
        self.prompt_len = trace.prompt_len[:: self.G]
        self.next = 0
        self.index: dict[int, int] = {}  # prompt_id -> group index in the trace

    def draw(self, count: int) -> list[E.GroupSpec]:
        out = []
        for _ in range(count):
            k = self.next % self.n
            pid = int(self.pids[k]) + (self.next // self.n) * self.span
            self.next += 1
            self.index[pid] = k
            out.append(E.GroupSpec(pid, self.G, int(self.prompt_len[k])))
        return out

    def row(self, prompt_id: int, sample_idx: int) -> int:
        return self.index[prompt_id] * self.G + sample_idx


@dataclass
class ClusterSpec:
    instances: int
    devices_per_instance: int
    max_seqs: int
    kv_tokens: int
    trainer_devices: int
    colocated: bool
    slowdowns: np.ndarray  # per instance
    elastic: tuple[int, ...] = ()  # instances on the trainer's devices (rollout only while it waits)
    stragglers: np.ndarray | None = None  # per instance, the part of `slowdowns` that is not MoE imbalance


class Cluster(Body):
    """Runs one policy on one trace until the trainer has published `steps` versions."""

    # slots: the per-event paths read these attributes millions of times (a new one goes here too)
    __slots__ = ("env", "trace", "spec", "cost", "policy", "steps", "data", "_plens", "_rlens", "progress",
                 "live", "pid_of", "version_of", "plen", "rlen",
                 "interrupted", "migrations", "events", "sim_events", "done", "faults", "draws", "failures",
                 "failed_ids", "_fail_epoch", "_latency", "_host_g", "_notifying", "_bg", "_idle_progress",
                 "_idle_since", "instances", "imbalance", "_strag", "_moe", "wsync", "trainer", "_turns",
                 "_tool_wait", "_tool_tok", "tool_tokens_of", "_gaps", "lendable", "lent_ids")

    def __init__(self, trace: Trace, spec: ClusterSpec, cost: CostModel, policy: Policy, steps: int,
                 reference: bool = False, log: EventLog | None = None,
                 progress: Callable[[int, float], None] | None = None,
                 faults: FaultConfig | None = None, seed: int = 0, weights: WeightSyncConfig | None = None,
                 imbalance: ImbalanceProcess | None = None):
        self.env = simpy.Environment()
        self.trace = trace
        self.spec = spec
        self.cost = cost
        self.policy = policy
        self.steps = steps
        self.data = Dataset(trace)
        self._plens = trace.prompt_len.tolist()  # Python ints: cheaper to index per dispatch
        self._rlens = trace.response_len.tolist()
        # multi-turn trajectories (trace columns turns, tool_wait_s, tool_tokens), by row; None: one turn each
        self._turns: list[int] | None = None
        self._tool_wait: list[float] = []
        self._tool_tok: list[int] = []
        if trace.turns is not None:
            n_rows = len(trace)
            self._turns = trace.turns.tolist()
            self._tool_wait = trace.tool_wait_s.tolist() if trace.tool_wait_s is not None else [0.0] * n_rows
            self._tool_tok = trace.tool_tokens.tolist() if trace.tool_tokens is not None else [0] * n_rows
        self.tool_tokens_of: dict[int, int] = {}  # trajectory -> tool-output tokens over its calls (multi-turn)
        self._gaps: set[int] = set()  # trajectory ids skipped by an out-of-order dispatch, not yet dispatched
        self.log = log if log is not None else EventLog()
        self.progress = progress
        self.live: dict[int, Seq] = {}  # live trajectory -> its segment (Seq.instance: -1 while it moves)
        # what the trainer consumes, per trajectory id (ids are dense, assigned in dispatch order by the scheduler)
        self.pid_of = array("q")
        self.version_of = array("i")  # version of its first token
        self.plen = array("i")
        self.rlen = array("i")
        self.interrupted: dict[int, list[Seq]] = {}  # instance -> seqs waiting for its reload
        self.migrations = 0
        self.events = 0  # scheduler events delivered
        self.sim_events = 0  # SimPy events processed (boundaries, loads, trainer, arrivals)
        self.done = self.env.event()
        self.faults = faults if faults is not None else FaultConfig()
        self.draws = FaultDraws(self.faults, seed)
        load_fails = self.draws.load_fails if self.faults.load_fail_prob > 0 else None
        self.failures = 0
        self.failed_ids: set[int] = set()  # instances that failed at least once
        self._fail_epoch = [0] * spec.instances  # failures per instance (a pending result dies with it)
        self._latency = cost.request_latency_s
        self._host_g = 1.0  # shared-host slowdown of the engines now (cost.host_cores)
        self._notifying: dict[int, tuple[Seq, Instance, int]] = {}  # finished, result not yet at the policy
        self._bg = 0  # background events pending
        self._idle_progress: tuple[int, int] = (-1, -1)  # (dispatches, steps) when last seen idle
        self._idle_since = 0.0
        # rollout instances can be lent to the trainer where it has devices of its own (not
        # colocated, no elastic instances on them, no shared host)
        self.lendable = not spec.colocated and not spec.elastic and cost.host_cores == 0
        self.lent_ids: dict[int, bool] = {}  # lent to the trainer -> on its way back (resharding)
        self.instances: list[Instance] = []
        for i in range(spec.instances):
            inst = Instance(i, spec.max_seqs, spec.kv_tokens, spec.devices_per_instance, cost,
                            float(spec.slowdowns[i]), self.log, self._scheduler_for(i),
                            self._boundary_scheduler_for(i), self._on_finish,
                            self._on_stopped, reference=reference, load_fails=load_fails)
            inst.versions = {0}
            inst.on_loaded = self._on_loaded
            inst.on_staged = self._on_staged
            inst.on_tool = self._on_tool
            self.instances.append(inst)
        self.imbalance = imbalance
        strag = spec.stragglers if spec.stragglers is not None else np.ones(spec.instances)
        self._strag = np.asarray(strag[: spec.instances], dtype=float)
        self._moe = np.asarray(spec.slowdowns[: spec.instances], dtype=float) / self._strag
        self.wsync = WeightSync(weights if weights is not None else WeightSyncConfig(), cost,
                                spec.instances - len(spec.elastic))
        trainer_devices = (spec.instances * spec.devices_per_instance if spec.colocated else spec.trainer_devices)
        self.trainer = Trainer(trainer_devices, cost, spec.colocated, self.log,
                               self._scheduler_for(-1), self._on_published,
                               restart_at=self.faults.trainer_restart_at, restart_s=self.faults.trainer_restart_s)
        if cost.host_cores > 0:
            self.trainer.on_trained = self._on_trained

    # ---- clock -----------------------------------------------------------------------------------
    def _scheduler_for(self, iid: int) -> Callable[[float, int, Callable[[object], None]], None]:
        env = self.env
        queue: list[Any] = env._queue  # SimPy's event queue: (time, priority, id, event)
        eid = env._eid
        base = iid if iid >= 0 else _KIND_STRIDE - 1

        def schedule(t: float, kind: int, fn: Callable[[Any], None]) -> None:
            if t < env._now:
                raise RuntimeError(f"scheduling in the past: {t} < {env._now}")
            heapq.heappush(queue, (t, kind * _KIND_STRIDE + base, next(eid), _Call((fn,), 0)))

        return schedule

    def _boundary_scheduler_for(self, iid: int) -> Callable[[float, tuple, int], None]:
        """schedule(t, callbacks, arg): an event at t, ordered as kind BOUNDARY (`dora.sim.order`),
        that calls each of `callbacks` with itself (its `arg` attribute is `arg`)."""
        env = self.env
        queue: list[Any] = env._queue  # SimPy's event queue: (time, priority, id, event)
        eid = env._eid
        prio = BOUNDARY * _KIND_STRIDE + iid

        def schedule(t: float, callbacks: tuple, arg: int) -> None:
            if t < env._now:
                raise RuntimeError(f"scheduling in the past: {t} < {env._now}")
            heapq.heappush(queue, (t, prio, next(eid), _Call(callbacks, arg)))

        return schedule

    def run(self) -> None:
        el = set(self.spec.elastic)
        specs = tuple(E.InstanceSpec(i.id, i.max_seqs, i.kv_tokens, i.devices, i.id in el) for i in self.instances)
        self.deliver(E.ClusterStarted(specs, self.trainer.devices, cost=self.cost.decode_cost(), lend=self.lendable,
                                      train_cost=self.cost.train_cost(), steps=self.steps))
        self._schedule_faults()
        if self.imbalance is not None and self.imbalance.active():
            self._redraw_later(self.imbalance.cfg.redraw_s)
        env = self.env
        # The run allocates millions of small acyclic objects; the cyclic collector would
        # re-scan them all again and again (a third of the wall time at 1024 instances). The
        # run makes no reference cycles that outlive an event, so it is paused until the end.
        gc_on = gc.isenabled()
        gc.disable()
        try:
            env.run(until=self.done)
        except RuntimeError as e:
            if "No scheduled events left" in str(e) or "until" in str(e):
                raise RuntimeError(self._stall_message()) from None
            raise
        finally:
            if gc_on:
                gc.enable()
        if not self.done.triggered:
            raise RuntimeError(self._stall_message())
        self.sim_events = next(env._eid) - len(env._queue) - 1
        self._finalize()

    def _stall_message(self) -> str:
        return (f"policy {self.policy.name} stalled at t={self.env.now:.3f}s after {self.trainer.steps_done} of "
                f"{self.steps} steps: nothing left to simulate")

    # ---- time-varying MoE imbalance ---------------------------------------------------------------
    # Background events (failures, recoveries, redraws; kind FAULT) recur for ever, so the end of
    # work is no longer an empty queue. After one, if only background events are pending (the
    # cluster is idle), the run has stalled when no instance is down (no recovery can unblock
    # the policy), or when it has stayed idle, dispatching nothing and training nothing, for
    # 10 repair times (every instance down when it went idle came back long ago).
    def _background(self, t: float, iid: int, fn: Callable[[], None]) -> None:
        self._bg += 1

        def fire(_: object) -> None:
            self._bg -= 1
            fn()
            if len(self.env._queue) == self._bg and not self.done.triggered:
                self._check_idle()

        self._scheduler_for(iid)(t, FAULT, fire)

    def _check_idle(self) -> None:
        now = self.env.now
        progress = (len(self.pid_of), self.trainer.steps_done)
        if progress != self._idle_progress:
            self._idle_progress, self._idle_since = progress, now
        down = any(not i.alive and i.id not in self.lent_ids for i in self.instances)
        if not down or now - self._idle_since > 10 * self.faults.repair_s:
            raise RuntimeError(self._stall_message())

    def _redraw_later(self, t: float) -> None:
        def redraw() -> None:
            self._redraw(t)

        self._background(t, -1, redraw)

    def _redraw(self, now: float) -> None:
        imb = self.imbalance
        assert imb is not None
        self._moe = imb.next(self._moe)
        self._apply_slowdowns(now)
        self._redraw_later(now + imb.cfg.redraw_s)

    # ---- faults --------------------------------------------------------------------------------
    def _schedule_faults(self) -> None:
        el = set(self.spec.elastic)
        for t, i in self.faults.fail_at:
            if not 0 <= int(i) < len(self.instances):
                raise InputError(f"faults.fail_at: instance {int(i)} does not exist; use an id in "
                                 f"0..{len(self.instances) - 1}")
            self._fail_later(float(t), int(i))
        if self.faults.mtbf_s > 0:
            for inst in self.instances:
                if inst.id not in el:
                    self._fail_later(self.draws.time_to_failure(), inst.id)

    def _fail_later(self, t: float, iid: int) -> None:
        def failed() -> None:
            self._fail(iid, t)

        self._background(t, iid, failed)

    def _fail(self, iid: int, now: float) -> None:
        """Instance `iid` dies: everything on it or headed to it is lost; back after repair_s."""
        inst = self.instances[iid]
        if iid in self.lent_ids:  # its devices train: no rollout instance to fail; the next draw stands
            if self.faults.mtbf_s > 0:
                self._fail_later(now + self.draws.time_to_failure(), iid)
            return
        if not inst.alive:
            return  # already down
        self.failures += 1
        self.failed_ids.add(iid)
        self._fail_epoch[iid] += 1
        self.wsync.forget(iid)
        lost = inst.fail(now)
        lost_ids = [s.traj for s in lost]
        for s in lost:
            end_row(self.log, now, "lost", s, "instance failure")
        for s in self.interrupted.pop(iid, []):  # waiting for this instance's reload
            lost_ids.append(s.traj)
        instance_row(self.log, now, "fail", iid, detail="instance failure")
        for traj in lost_ids:
            self.live.pop(traj, None)
        self.deliver(E.InstanceFailed(iid))
        for traj in lost_ids:
            self.deliver(E.TrajectoryLost(traj, iid, "instance failure"))
        back = now + self.faults.repair_s

        def recovered() -> None:
            self._recover(iid, back)

        self._background(back, iid, recovered)

    def _recover(self, iid: int, now: float) -> None:
        inst = self.instances[iid]
        version = self.trainer.version  # the repair fetched the newest published weights
        inst.recover(now, version)
        instance_row(self.log, now, "recover", iid, version)
        self.deliver(E.InstanceRecovered(iid, version))
        if self.faults.mtbf_s > 0 and iid not in self.spec.elastic:
            self._fail_later(now + self.draws.time_to_failure(), iid)

    # ---- scheduler <-> body -------------------------------------------------------------------
    def deliver(self, ev: E.Event) -> None:
        self.events += 1
        for a in self.policy.handle(ev, self.env._now):
            self.apply(a)

    # ---- the body contract (dora.body.Body: its `apply` is the action table) ------------------------
    def now(self) -> float:
        return self.env._now

    def draw(self, count: int) -> list[E.GroupSpec]:
        return self.data.draw(count)

    def group_size(self) -> int:
        return self.data.G

    def kv_in_use(self, instances: tuple[int, ...]) -> tuple[int, ...]:
        now, insts = self.env._now, self.instances
        return tuple(insts[i].kv_used(now) for i in instances)

    def _dispatch(self, a: A.Dispatch, now: float) -> None:
        inst = self.instances[a.instance]
        if not inst.alive:
            raise RuntimeError(f"policy bug: dispatch to failed instance {a.instance}")
        if a.version not in inst.versions and inst.loading != a.version and (
                inst.load_req is None or inst.load_req[0] != a.version):
            raise RuntimeError(f"policy bug: dispatch of version {a.version} to instance {a.instance} "
                               f"holding {sorted(inst.versions)}")
        traj, pid, version = a.traj, a.prompt_id, a.version
        row = self.data.row(pid, a.sample_idx)
        plen = self._plens[row]
        rlen = self._rlens[row]
        s = Seq(traj, pid, a.instance, version, rlen, plen, plen, now, plen)
        s.sample_idx = a.sample_idx
        turns = self._turns
        if turns is not None and turns[row] > 1:
            self._split_turns(s, row, turns[row])
        self.live[traj] = s
        if traj == len(self.pid_of):
            self.pid_of.append(pid)
            self.version_of.append(version)
            self.plen.append(plen)
            self.rlen.append(rlen)
        else:
            self._dispatch_out_of_order(traj, pid, version, plen, rlen)
        start_row(self.log, now, "dispatch", s, plen)
        inst.waiting.append(s)  # inst.submit(s, now), inlined (hot path)
        inst.touch(now)

    def _dispatch_out_of_order(self, traj: int, pid: int, version: int, plen: int, rlen: int) -> None:
        """Trajectory ids are dense, given in dispatch order, except when a policy's action list
        samples groups before dispatching trajectories it numbered already: the new groups' own
        dispatches (delivered at once) come first. Ids skipped that way are held open (`_gaps`)
        for their dispatch, later in the same action list."""
        n = len(self.pid_of)
        if traj > n:
            for k in range(n, traj):
                self._gaps.add(k)
                self.pid_of.append(-1)
                self.version_of.append(-1)
                self.plen.append(0)
                self.rlen.append(0)
            self.pid_of.append(pid)
            self.version_of.append(version)
            self.plen.append(plen)
            self.rlen.append(rlen)
            return
        if traj not in self._gaps:
            raise RuntimeError(f"policy bug: trajectory ids must be dense and increasing, got {traj} again")
        self._gaps.discard(traj)
        self.pid_of[traj] = pid
        self.version_of[traj] = version
        self.plen[traj] = plen
        self.rlen[traj] = rlen

    def _split_turns(self, s: Seq, row: int, turns: int) -> None:
        tool = self._tool_tok[row]
        s.split_turns(turns, self._tool_wait[row], tool)
        self.tool_tokens_of[s.traj] = (turns - 1) * tool

    def _abort(self, a: A.Abort, now: float) -> None:
        s = self.live.get(a.traj)
        if s is None:
            return  # already finished or gone
        iid = s.instance
        if iid < 0:
            s.stop = Stop(ABORT, a.reason)  # in transit: dropped on arrival
            return
        if s.state == GONE:
            waiting = self.interrupted.get(iid)
            if waiting is None or s not in waiting:
                # it finished at the boundary being processed, its finish not yet delivered:
                # it is logged as aborted when its turn comes
                s.stop = Stop(ABORT, a.reason)
                return
            waiting.remove(s)  # interrupted, waiting for its instance's reload
            stop_row(self.log, now, "abort", iid, s, a.reason)
            del self.live[s.traj]
            return
        self.instances[iid].request_stop(s, Stop(ABORT, a.reason), now)

    def _migrate(self, a: A.Migrate, now: float) -> None:
        if a.traj in self._notifying:
            return  # it finished; its result is on its way to the policy
        s = self.live[a.traj]
        src = s.instance
        if not self.instances[a.dst].alive:
            raise RuntimeError(f"policy bug: migrate trajectory {a.traj} to failed instance {a.dst}")
        if src < 0 or src == a.dst:
            raise RuntimeError(f"policy bug: migrate trajectory {a.traj} from {src} to {a.dst}")
        if s.version not in self.instances[a.dst].versions and self.instances[a.dst].loading != s.version:
            raise RuntimeError(f"policy bug: migrate version {s.version} to instance {a.dst} "
                               f"holding {sorted(self.instances[a.dst].versions)}")
        s.stop = None
        self.instances[src].request_stop(s, Stop(MIGRATE, dst=a.dst, kv=a.kv), now)

    def _load(self, a: A.LoadVersion, now: float) -> None:
        inst = self.instances[a.instance]
        if not inst.alive:
            raise RuntimeError(f"policy bug: weight load on failed instance {a.instance}")
        if a.mode == "drain":
            other = [s for s in list(inst.running.values()) + list(inst.waiting) + list(inst.tooling.values())
                     if s.version != a.version and s.stop is None]
            if other:
                raise RuntimeError(f"policy bug: drain-load of version {a.version} on instance {a.instance} "
                                   f"with {len(other)} trajectories of other versions")
        on_trainer = self.spec.colocated or a.instance in self.spec.elastic  # the weights are on these devices
        inst.request_load(a.version, a.mode, a.evict, self._reshard_s if on_trainer else self.wsync.load_s, now)

    def _lend(self, a: A.LendInstance, now: float) -> None:
        inst = self.instances[a.instance]
        if not self.lendable:
            raise RuntimeError(f"policy bug: lent instance {a.instance}, but this run cannot lend (ClusterStarted.lend)")
        if self.trainer.busy:
            raise RuntimeError(f"policy bug: lent instance {a.instance} while the trainer is busy")
        if (not inst.alive or inst.n or inst.waiting or inst.tooling or inst.loading >= 0 or inst.load_req is not None
                or self.interrupted.get(inst.id)):
            raise RuntimeError(f"policy bug: lent instance {a.instance}, which is not drained")
        inst.fail(now)  # stops serving: nothing on it to lose
        self.wsync.forget(inst.id)
        self.lent_ids[inst.id] = False
        self.trainer.lent += inst.devices
        instance_row(self.log, now, "lend", inst.id, tokens=inst.devices)

    def _take_back(self, a: A.ReturnInstance, now: float) -> None:
        iid = a.instance
        inst = self.instances[iid]
        if self.lent_ids.get(iid, True):
            raise RuntimeError(f"policy bug: took back instance {iid}, which is not lent (or already on its way back)")
        if self.trainer.busy:
            raise RuntimeError(f"policy bug: took back instance {iid} while the trainer is busy")
        self.trainer.lent -= inst.devices
        self.lent_ids[iid] = True
        version = self.trainer.version  # its devices hold the newest weights: an on-device reshard
        dt = self.cost.colocated_reshard_s
        back = now + dt

        def returned() -> None:
            del self.lent_ids[iid]
            inst.recover(back, version)
            instance_row(self.log, back, "return", iid, version, dur_s=dt)
            self.deliver(E.InstanceReturned(iid, version))

        self._background(back, iid, returned)

    def _host_slowdown(self, g: float, now: float) -> None:
        """Shared host: every engine's steps from now on run g times slower than its own speed."""
        if g == self._host_g:
            return
        self._host_g = g
        self._apply_slowdowns(now)

    def _apply_slowdowns(self, now: float) -> None:
        """Each instance's speed factor: MoE imbalance x straggler x shared-host contention."""
        f = self._moe * self._strag * self._host_g
        for inst in self.instances:
            inst.request_slowdown(float(f[inst.id]), now)

    def _on_trained(self, now: float) -> None:
        self._host_slowdown(1.0, now)

    def _train(self, a: A.Train, now: float) -> None:
        rows = []
        tools = self.tool_tokens_of  # tool output is part of the trained sequence (outside the loss)
        for traj in a.trajs:
            p, r = self.plen[traj], self.rlen[traj]
            rows.append((traj, self.pid_of[traj], self.version_of[traj], p + r + tools.get(traj, 0), r))
        if self.cost.host_cores > 0:  # start once this instant's dispatches have reached the engines
            self._scheduler_for(-1)(now, TRAINER, lambda _: self._train_shared(rows, now))
            return
        self.trainer.start(now, rows)

    def _train_shared(self, rows: list, now: float) -> None:
        """Shared host: the trainer and the engines holding work share the host's cores."""
        g = self.cost.host_factor(1 + sum(1 for i in self.instances if i.alive and (i.n > 0 or i.waiting)))
        self.trainer.speed = g
        self._host_slowdown(g, now)
        self.trainer.start(now, rows)

    # ---- callbacks from instances and trainer --------------------------------------------------
    def _on_finish(self, s: Seq, inst: Instance, now: float) -> None:
        if self._latency > 0.0:  # the result reaches the policy request_latency_s later
            self._notifying[s.traj] = (s, inst, self._fail_epoch[inst.id])
            self._scheduler_for(inst.id)(now + self._latency, ARRIVAL, lambda _: self._notify(s.traj))
            return
        self._finished(s, inst, now)

    def _finished(self, s: Seq, inst: Instance, now: float) -> None:
        """Log the finish and tell the policy."""
        traj = s.traj
        end_row(self.log, now, "finish", s)
        del self.live[traj]
        self.deliver(E.TrajectoryFinished(traj, inst.id, self.rlen[traj]))

    def _notify(self, traj: int) -> None:
        """A finished trajectory's result reaches the policy (request_latency_s after its last token);
        what an abort or a failure of its instance did meanwhile decides how it ends."""
        s, inst, epoch = self._notifying.pop(traj)
        now = self.env._now
        if self._fail_epoch[inst.id] != epoch:  # the result died with its instance
            end_row(self.log, now, "lost", s, "instance failure")
            del self.live[traj]
            self.deliver(E.TrajectoryLost(traj, inst.id, "instance failure"))
            return
        stop = s.stop
        if stop is not None and stop.kind == ABORT:  # aborted by the policy before it learnt of the finish
            end_row(self.log, now, "abort", s, stop.reason)
            del self.live[traj]
            return
        s.stop = None  # a migration asked meanwhile came too late: it finished where it was
        self._finished(s, inst, now)

    def _on_tool(self, s: Seq, inst: Instance, tokens: int) -> None:
        """A multi-turn trajectory's tool call started (tokens -1) or ended: the policy is told."""
        self.deliver(E.ToolCallStarted(s.traj, inst.id) if tokens < 0 else E.ToolCallEnded(s.traj, inst.id, tokens))

    def _on_stopped(self, s: Seq, inst: Instance) -> None:
        now = self.env.now
        why = s.stop
        if why is None:
            raise RuntimeError(f"trajectory {s.traj} stopped without a stop request")
        if why.kind == ABORT:
            end_row(self.log, now, "abort", s, why.reason)
            del self.live[s.traj]
        elif why.kind == MIGRATE:
            dst_i, kv = why.dst, why.kv
            end_row(self.log, now, "migrate_out", s, f"to {dst_i}")
            s.instance = -1
            self.migrations += 1
            ctx = s.ctx - s.prefill if s.multi else s.ctx  # (multi-turn: the context computed so far)
            dt = self.cost.kv_transfer_s(ctx) if kv else 0.0
            t = now + dt
            self._scheduler_for(dst_i)(t, ARRIVAL, lambda _: self._arrive(s, inst.id, dst_i, kv, t))
        else:  # INTERRUPT
            end_row(self.log, now, "interrupt", s)
            self.interrupted.setdefault(inst.id, []).append(s)

    def _arrive(self, s: Seq, src: int, dst: int, kv: bool, now: float) -> None:
        if not self.instances[dst].alive:  # its destination failed while it was in transit
            stop_row(self.log, now, "lost", dst, s, "instance failure")
            del self.live[s.traj]
            if not s.aborting():
                self.deliver(E.TrajectoryLost(s.traj, dst, "instance failure"))
            return
        stop = s.stop
        if stop is not None and stop.kind == ABORT:
            stop_row(self.log, now, "abort", dst, s, stop.reason)
            del self.live[s.traj]
            return
        inst = self.instances[dst]
        if s.multi:
            n = self._moved_turns(s, dst, kv, now)
            carried = s.ctx - s.prefill  # computed context: moved, or re-prefilled from scratch
        else:
            n = Seq(s.traj, s.prompt_id, dst, s.version, s.remaining, s.ctx, 0 if kv else s.ctx, now)
            carried = s.ctx
        n.follow(s)
        if not kv:
            inst.reprefill_tokens += carried
        self.live[s.traj] = n
        start_row(self.log, now, "migrate_in", n, carried, f"from {src} kv" if kv else f"from {src} reprefill")
        if n.tool_end > now:
            inst.wait_tool(n, now)  # its tool call is still under way: it waits here
        elif n.tool_end >= 0:
            inst.tool_returned(n, now)  # the call came back while it moved
        else:
            inst.submit(n, now)
        self.deliver(E.MigrationDone(s.traj, src, dst))

    def _moved_turns(self, s: Seq, dst: int, kv: bool, now: float) -> Seq:
        """The segment that continues multi-turn `s` after a migration: its pending prefill stays
        pending (with the KV) or the whole context is prefilled again (without); the KV it had
        pinned between turns comes pinned (with the KV)."""
        n = Seq(s.traj, s.prompt_id, dst, s.version, s.remaining, s.ctx, s.prefill if kv else s.ctx, now,
                s.fresh)
        n.carry(s)
        if kv:
            n.held = s.held
        return n

    def _on_loaded(self, inst: Instance, version: int, mode: str) -> None:
        now = self.env.now
        if mode == "interrupt":
            # continue every in-flight trajectory under the new version: re-prefill its context
            for s in self.interrupted.pop(inst.id, []):
                n = Seq(s.traj, s.prompt_id, inst.id, version, s.remaining, s.ctx, s.ctx, now)
                n.follow(s)
                if s.multi:
                    n.carry(s)
                inst.reprefill_tokens += s.ctx
                self.live[s.traj] = n
                start_row(self.log, now, "resume", n, s.ctx)
                inst.waiting.append(n)
            for s in inst.waiting:
                if s.version != version:
                    if s.multi:
                        self._reprefill_between_turns(s, inst, version, now)
                        continue
                    # queued, nothing generated yet: just the new version
                    end_row(self.log, now, "interrupt", s)
                    s.version = version  # (a preempted one keeps its tokens and decode share)
                    s.t_start = now
                    start_row(self.log, now, "resume", s, s.ctx)
            for s in inst.tooling.values():
                if s.version != version:
                    self._reprefill_between_turns(s, inst, version, now)
        self.deliver(E.WeightsLoaded(inst.id, version))

    def _reprefill_between_turns(self, s: Seq, inst: Instance, version: int, now: float) -> None:
        """A multi-turn trajectory queued or in a tool call on `inst` when its weights were swapped
        (interrupt mode): it continues under `version`, its computed context (pinned or not) to
        prefill again."""
        end_row(self.log, now, "interrupt", s)
        s.restart(now, inst.id, version, s.tokens())
        stale = s.ctx - s.prefill
        s.prefill = s.ctx
        inst.reprefill_tokens += stale
        start_row(self.log, now, "resume", s, stale)

    def _reshard_s(self, iid: int, version: int, now: float) -> float:
        return self.cost.colocated_reshard_s

    def _on_staged(self, inst: Instance, version: int) -> None:
        self.wsync.on_staged(inst.id, version)

    def _on_published(self, version: int) -> None:
        if self.progress is not None:
            self.progress(version, self.env.now)
        if version >= self.steps:
            self.done.succeed()
            return
        pause = 0.0 if self.spec.colocated else self.wsync.on_publish(version, self.env.now)
        if pause > 0:
            el = self.spec.elastic
            for inst in self.instances:
                if inst.alive and inst.id not in el:
                    inst.request_pause(pause, version, self.env.now)
        self.deliver(E.VersionPublished(version))

    # ---- end of run ------------------------------------------------------------------------------
    def _finalize(self) -> None:
        """Record what is still in flight when the last step is published (not lost, not trained)."""
        now = self.env.now
        for inst in self.instances:
            for s in list(inst.running.values()):
                made = inst.progress(s, now)
                s.made = made
                end_row(self.log, now, "end", s)
            for s in inst.waiting:
                end_row(self.log, now, "end", s)
            for s in inst.tooling.values():
                end_row(self.log, now, "end", s)
        for s, inst, _ in self._notifying.values():  # finished, result still on its way
            end_row(self.log, now, "end", s)
        self.close_log(self.policy.view, now, self.trainer.version)
