"""The real cluster: Ray actors (rollout engines, trainer) driven by a `dora/sched` policy.

The orchestrator is the executor's body (`dora.body.Body`, whose `apply` is the action table):
it owns the clock (wall seconds since start), the run's state and the main loop, which polls
the engines and the pending futures (weight loads, replacements, checkpoints, the trainer step)
and hands what comes back to the side it belongs to. It writes the same event log as the
simulator; `SampleGroups` draws prompt groups from the task (`draw`, here), the rest is
translated by its sides:

  the rollout side (`dora.exec.rollout`)   Dispatch, Migrate, Abort, ReadKV, LoadVersion; results
  the trainer side (`dora.exec.training`)  Train; the new version published
  the fault path (`dora.exec.recovery`)    dead engines, replacements, failed loads, trainer
                                           restarts: beside the normal path, not inside it
  collective weight sync (`dora.exec.collective`)  the trainer's broadcast to the engines

Starting the runtime and gathering results are in `dora.exec.run`; the trainer's actor, in
`dora.exec.trainer_actor`.
"""

from __future__ import annotations

import math
import time
from typing import Any

from dora.body import Body, Tracked, run_info as body_run_info
from dora.eventlog import EventLog
from dora.exec.collective import Collective
from dora.exec.engine.records import EngineBusyError
from dora.exec.faults import actor_errors
from dora.exec.recovery import Recovery
from dora.exec.rollout import Rollout
from dora.exec.training import Training
from dora.exec.run_config import ExecConfig
from dora.sched import events as E
from dora.sched.registry import POLICIES
from dora.sched.policy import Policy
from dora.sched.record import encode


def wall_at(t_perf: float) -> float:
    """The time.time() reading that corresponds to perf_counter() reading `t_perf` (the tightest of
    a few paired readings, so a preemption between two clock reads does not skew it)."""
    best = (math.inf, 0.0)
    for _ in range(5):
        a = time.perf_counter()
        w = time.time()
        b = time.perf_counter()
        if b - a < best[0]:
            best = (b - a, w - ((a + b) / 2 - t_perf))
    return best[1]


class Orchestrator(Rollout, Training, Recovery, Collective, Body):
    """Runs one policy for `cfg.steps` trainer steps on live engines; returns its event log."""

    def __init__(self, cfg: ExecConfig, name: str, engines: list, trainer, tokenizer, examples, progress: bool = True,
                 runtime=None, start_engine=None, start_trainer=None):
        if runtime is None:
            import ray as runtime
        self.ray = runtime
        self.dead_errors = actor_errors(runtime)
        self.start_engine = start_engine  # instance -> a new engine actor (replacements)
        self.start_trainer = start_trainer  # () -> a new trainer actor (restarts)
        self.cfg = cfg
        self.name = name
        self.engines = engines
        self.trainer = trainer
        self.tok = tokenizer
        self.examples = examples
        self.progress = progress
        self.kv_migration = False  # the engines can move a KV cache (asked when the run starts)
        from dora.exec.rewards import get_reward
        from dora.exec.tasks import tokenize_prompts

        self.reward_fn = get_reward(cfg.task.reward_name())
        self.prompt_ids = tokenize_prompts(tokenizer, examples)
        pc = cfg.policy
        self.policy: Policy = POLICIES[name](pc)
        r = cfg.rollout
        self.slots = r.max_num_seqs
        self.run_info = body_run_info("exec", name, pc.eta, pc.batch_size, pc.group_size, cfg.steps, r.instances, 1,
                                      r.instances, 1, False, [], r.max_num_seqs, model=cfg.model, backend=r.backend)
        self.log = EventLog(self.run_info)
        self.t0 = time.perf_counter()
        self.t0_wall = wall_at(self.t0)  # engines stamp requests with time.time()
        self.requests: list[tuple] = []  # profile rows of finished requests (dora.profile 'requests')
        self.next_draw = 0
        self.example_of: dict[int, int] = {}  # prompt_id -> example index
        self.drawn_at: dict[int, int] = {}  # prompt_id -> trainer version when it was drawn (trace `step`)
        self.live: dict[int, Tracked] = {}  # live trajectory -> where it runs, its version, its segment
        self.finished: dict[int, tuple[Tracked, Any, float]] = {}  # not yet trained -> (it, GenResult, time)
        self.loads: dict[Any, tuple[int, int, str, float]] = {}  # future -> (instance, version, mode, t_start)
        self.weights: dict[int, Any] = {}  # version -> ObjectRef of tensors, checkpoint path, or "collective"
        # collective weight sync (dora.exec.collective)
        self.sync_gen = 0  # group generations made so far
        self.sync_group: tuple[Any, tuple[int, ...], dict] | None = None  # (trainer, members, spec) of the group
        self.sync_addr: tuple[Any, dict] | None = None  # (trainer, its store's address)
        self.awaiting_sync: dict[int, float] = {}  # replacement up, waiting for the next publication -> t_start
        self.train_job = None  # (future, t_start, batch rows)
        self.version = 0
        self.step_rows: list[dict] = []
        self.trace_rows: list[dict] = []
        self.last_pub = 0.0
        # faults
        self.faults = cfg.faults
        self.dead: set[int] = set()  # instances whose actor died (until a replacement is back)
        self.retired: set[int] = set()  # removed after failed weight loads (a replacement may still come)
        self.no_restart: set[int] = set()  # a replacement failed too: down for good
        self.dying: dict[int, str] = {}  # instance -> why, noticed while applying actions (handled by the loop)
        self.recovering: dict[Any, tuple[int, int, float]] = {}  # future -> (instance, version loading or -1, t_start)
        self.killed_instance = False
        self.killed_trainer = False
        self.republishing = False  # a new trainer redoes a step whose publication the old one died in
        self.injected_dead: set[int] = set()
        self.load_failures: dict[tuple[int, int], int] = {}  # (instance, version) -> failed attempts
        self.inject_load: list[list[int]] = [list(x) for x in self.faults.load_fail_at]  # failures still to inject
        self.batches: dict[int, list] = {}  # version a step publishes -> its batch (replayed after a restart)
        self.trained_at: dict[int, list[int]] = {}  # version -> prompt ids trained by the step publishing it
        self.saves: list[tuple[Any, int]] = []  # checkpoint futures
        self.ckpt_version = 0
        self.restarts: list[dict] = []
        self.held: dict[int, int] = {i: 0 for i in range(len(engines))}  # instance -> version its engine holds
        self.noop_loads: list[tuple[int, int, str, float]] = []  # loads of the version an engine holds already
        self.pub_t: dict[int, float] = {0: 0.0}  # version -> publication time
        self.last_fin_t = -1.0  # time of the latest finished trajectory
        self.restarting: tuple[float, str, int] | None = None  # (t, why, step) while a restarted trainer catches up

    # ---- clock and plumbing --------------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter() - self.t0

    def deliver(self, ev: E.Event) -> None:
        """Hand an event to the policy, record both in the log (`sched` rows, for replay), apply."""
        now = self.now()
        actions = self.policy.handle(ev, now)
        self.log.add(now, "sched", detail=encode(ev, actions))
        for a in actions:
            self.apply(a)

    # ---- the body contract (dora.body.Body: its `apply` is the action table) ------------------------
    def draw(self, count: int) -> list[E.GroupSpec]:
        """The next prompts of the task, in order (wrapping around), as groups of G."""
        specs = []
        G = self.cfg.policy.group_size
        for _ in range(count):
            k = self.next_draw % len(self.examples)
            pid = self.next_draw
            self.next_draw += 1
            self.example_of[pid] = k
            self.drawn_at[pid] = self.version
            specs.append(E.GroupSpec(pid, G, len(self.prompt_ids[k])))
        return specs

    def group_size(self) -> int:
        return self.cfg.policy.group_size

    # ---- main loop ------------------------------------------------------------------------------------
    def run(self) -> None:
        ray = self.ray  # Ray, or dora.exec.local_runtime.LocalRuntime
        specs = tuple(E.InstanceSpec(i, self.slots, self.cfg.rollout.max_model_len * self.slots, 1)
                      for i in range(len(self.engines)))
        # every engine is of one backend: KV migration if they all can (hf: yes, vllm: no)
        self.kv_migration = all(ray.get([e.kv_migration.remote() for e in self.engines]))
        self.t0 = time.perf_counter()
        self.t0_wall = wall_at(self.t0)
        self.deliver(E.ClusterStarted(specs, 1, kv_migration=self.kv_migration, steps=self.cfg.steps))
        idle_since = time.perf_counter()
        while self.version < self.cfg.steps:
            self._maybe_kill_instance()
            did = self._poll()
            while self.dying:
                inst, why = self.dying.popitem()
                did = True
                if inst not in self.dead:
                    self._instance_died(inst, why)
            while self.noop_loads:
                did = True
                self._on_loaded(*self.noop_loads.pop(0))
            waiting = list(self.loads) + list(self.recovering) + [f for f, _ in self.saves]
            if self.train_job is not None:
                waiting.append(self.train_job[0])
                waiting.extend(self.trainer.others)  # a rank > 0 dying mid-step ends the step
            if waiting:
                ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
                for ref in ready:
                    did = True
                    self._on_ready(ref)
            if did:
                idle_since = time.perf_counter()
            elif time.perf_counter() - idle_since > 600:
                raise RuntimeError(f"policy {self.name} stalled: nothing happened for 600 s at step {self.version}")
        deadline = time.perf_counter() + 300
        while self.recovering and time.perf_counter() < deadline:  # replacements still starting join the cluster
            ready, _ = ray.wait(list(self.recovering), num_returns=1, timeout=1.0)
            for ref in ready:
                self._on_recovered(ref, *self.recovering.pop(ref))
        self._finish()

    def _on_ready(self, ref) -> None:
        """A future the loop waited on is done: a weight load, a replacement, a checkpoint, the
        trainer step; to the side it belongs to."""
        ray = self.ray
        if ref in self.loads:
            inst, version, mode, t_start = self.loads.pop(ref)
            try:
                ray.get(ref)
            except self.dead_errors as e:
                self.dying[inst] = f"actor died ({type(e).__name__})"
                return
            except (EngineBusyError, ValueError):
                raise  # a scheduling bug, not a fault
            except Exception as e:  # noqa: BLE001 - the load failed: retry or retire
                self._load_failed(inst, version, mode, t_start, e)
                return
            self._on_loaded(inst, version, mode, t_start)
        elif ref in self.recovering:
            self._on_recovered(ref, *self.recovering.pop(ref))
        elif any(ref is f for f, _ in self.saves):
            version = next(v for f, v in self.saves if f is ref)
            self.saves = [(f, v) for f, v in self.saves if f is not ref]
            try:
                ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a rank died while saving (its actor, or a peer under rank 0's gather)
                if isinstance(e, self.dead_errors) or self.restarting is not None or self._trainer_lost(e):
                    return  # the previous checkpoint stands; the step in flight fails too and is redone from it
                raise
            self.ckpt_version = max(self.ckpt_version, version)
            for v in [v for v in self.batches if v <= self.ckpt_version]:
                del self.batches[v]  # a restart never goes back past this checkpoint
        elif self.trainer.owns(ref):  # a rank > 0 call settled: if its rank died, the step in flight is cut
            why = self.trainer.dead_rank(self.dead_errors)
            if why and self.train_job is not None and self.start_trainer is not None:
                self._restart_trainer(why)
        elif self.train_job is not None and ref is self.train_job[0]:
            fut, t_start, rows, tokens = self.train_job
            try:
                stats = ray.get(fut)
            except Exception as e:  # a rank died (its actor, or a peer under rank 0's collective), else a bug
                why = self._trainer_lost(e)
                if not why:
                    raise
                self._restart_trainer(why)
                return
            if self.restarting is not None:
                stats, info = stats
                t_start = self._on_redone(info, float(stats.get("step_time_s", 0.0)))
            self.train_job = None
            self._on_trained(stats, t_start, rows, tokens)

    def _finish(self) -> None:
        """Stop what is still generating ('end' rows) and record what the scheduler still holds."""
        now = self.now()
        for t in list(self.live.values()):
            part = self._abort_on_engine(t) or None
            n = len(part.token_ids) if part is not None else t.before
            version = part.version if part is not None else self.policy.view.trajs[t.traj].version
            self._end_segment(t, "end", n, now, version)
        self.close_log(self.policy.view, now, self.version)
        for fut in list(self.loads) + list(self.recovering) + [f for f, _ in self.saves]:
            try:
                self.ray.get(fut)
            except Exception:  # noqa: BLE001 - the run is over; a load or save cut short no longer matters
                pass
