"""The real cluster: Ray actors (rollout engines, trainer) driven by a `dora/sched` policy.

The driver owns the clock (wall seconds since start) and translates between the policy's
events/actions and the actors, writing the same event log as the simulator:

  SampleGroups   -> draw prompt groups from the task, `sample` rows, GroupsSampled
  Dispatch       -> GenRequest to the engine (held there until its version is loaded)
  Migrate        -> abort on the source, resume prompt + generated tokens on the destination
                    (no KV transfer between engines yet: the re-prefill is logged)
  Abort          -> abort on the engine; its tokens are waste
  ReadKV         -> the engines' KV tokens in use (prompt + generated of running requests), KVRead
  LoadVersion    -> the trainer's weights for that version, loaded in-process ('drain' or
                    'interrupt': continue in-flight requests under the new version)
  Train          -> the groups' trajectories with rewards to the trainer actor; on return,
                    publish the new version (tensors through the Ray object store, or a
                    checkpoint directory) and deliver VersionPublished

A decode slot's share of the instance is charged to each segment (busy_s = seconds held ×
devices / max_num_seqs), so bubble ratios are computed by the same code as in simulation.

The fault path (dead engines, replacements, failed loads, trainer restarts) is beside this
normal path, in `dora.exec.recovery`; the trainer side (a batch to the trainer, the new version
published), in `dora.exec.training`; starting the runtime and gathering results, in
`dora.exec.run`; the trainer's actor, in `dora.exec.trainer_actor`.
"""

from __future__ import annotations

import math
import time
from typing import Any

from dora.body import Body, run_info as body_run_info
from dora.errors import InputError
from dora.eventlog import EventLog
from dora.exec.engine.base import EngineBusyError
from dora.exec.faults import actor_errors, cut_last_tensor
from dora.exec.recovery import Recovery
from dora.exec.training import Training
from dora.exec.run_config import ExecConfig
from dora.sched import actions as A
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


class Orchestrator(Training, Recovery, Body):
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
        self.where: dict[int, int] = {}  # live trajectory -> instance
        self.seg: dict[int, tuple[float, int]] = {}  # live trajectory -> (segment start, tokens before it)
        self.meta: dict[int, tuple[int, int, float]] = {}  # traj -> (prompt_id, sample_idx, t_dispatch)
        self.results: dict[int, Any] = {}  # finished, not yet trained trajectory -> GenResult
        self.fin_t: dict[int, float] = {}  # finished trajectory -> time
        self.fin_inst: dict[int, int] = {}  # finished trajectory -> instance
        self.loads: dict[Any, tuple[int, int, str, float]] = {}  # future -> (instance, version, mode, t_start)
        self.weights: dict[int, Any] = {}  # version -> ObjectRef of tensors or checkpoint path
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
    def event_log(self) -> EventLog:
        return self.log

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


    def _request(self, traj: int, version: int):
        from dora.exec.engine import GenRequest, SamplingConfig

        pid, sidx, _ = self.meta[traj]
        k = self.example_of[pid]
        return GenRequest(str(traj), self.prompt_ids[k], self.cfg.task.max_new_tokens, version,
                          SamplingConfig(temperature=self.cfg.rollout.temperature,
                                         seed=self.cfg.seed * 1_000_003 + pid * 131 + sidx))

    def _end_segment(self, traj: int, event: str, tokens_now: int, now: float, version: int, detail: str = "") -> None:
        start, before = self.seg.pop(traj)
        inst = self.where[traj]
        pid = self.meta[traj][0]
        dur = now - start
        self.log.add(now, event, inst, traj, pid, version, tokens=max(tokens_now - before, 0), detail=detail,
                     dur_s=dur, busy_s=dur / self.slots)

    # ---- actions --------------------------------------------------------------------------------------
    def _dispatch(self, a: A.Dispatch, now: float) -> None:
        self.meta[a.traj] = (a.prompt_id, a.sample_idx, now)
        self.where[a.traj] = a.instance
        self.seg[a.traj] = (now, 0)
        req = self._request(a.traj, a.version)
        self.log.add(now, "dispatch", a.instance, a.traj, a.prompt_id, a.version, tokens=len(req.prompt_ids))
        self.engines[a.instance].submit.remote([req])

    def _abort_on_engine(self, traj: int):
        """The partial result of an aborted trajectory; None if it finished meanwhile; False if
        its instance is dead (the main loop then handles the failure)."""
        inst = self.where[traj]
        if inst in self.dead or inst in self.dying:
            return False
        try:
            (part,) = self.ray.get(self.engines[inst].abort.remote([str(traj)]))
        except self.dead_errors as e:
            self.dying[inst] = f"actor died ({type(e).__name__})"
            return False
        return part

    def _migrate(self, a: A.Migrate, now: float) -> None:
        from dora.exec.engine import GenRequest

        src = self.where[a.traj]
        part = self._abort_on_engine(a.traj)
        if part is None:
            return  # it finished meanwhile: its result comes with the next poll
        if part is False:
            return  # its instance died: lost with it (the failure is handled by the main loop)
        now = self.now()
        self._end_segment(a.traj, "migrate_out", len(part.token_ids), now, part.version, detail=f"to {a.dst}")
        req = GenRequest.resume(part, max_new_tokens=self.cfg.task.max_new_tokens,
                                sampling=self._request(a.traj, part.version).sampling)
        self.where[a.traj] = a.dst
        self.seg[a.traj] = (now, len(part.token_ids))
        ctx = len(part.prompt_ids) + len(part.token_ids)
        self.log.add(now, "migrate_in", a.dst, a.traj, self.meta[a.traj][0], part.version, tokens=ctx,
                     detail=f"from {src} reprefill")
        self.engines[a.dst].submit.remote([req])
        self.deliver(E.MigrationDone(a.traj, src, a.dst))

    def _abort(self, a: A.Abort, now: float) -> None:
        if a.traj not in self.seg:
            return
        part = self._abort_on_engine(a.traj)
        if part is None:
            return  # finished meanwhile: the policy discards it when the result arrives
        if part is False:  # its instance is dead: what it generated there is gone
            self._end_segment(a.traj, "abort", self.seg[a.traj][1], self.now(),
                              self.policy.view.trajs[a.traj].version, detail=a.reason)
            self.where.pop(a.traj, None)
            return
        self._end_segment(a.traj, "abort", len(part.token_ids), self.now(), part.version, detail=a.reason)
        self.where.pop(a.traj, None)

    def _load(self, a: A.LoadVersion, now: float) -> None:
        if a.mode not in ("drain", "interrupt"):
            raise InputError(f"load mode {a.mode!r}: the engines support 'drain' and 'interrupt' only")
        self.log.add(now, "load_start", a.instance, version=a.version, detail=a.mode)
        if self.held.get(a.instance) == a.version:  # a replacement came back with it: nothing to load
            self.noop_loads.append((a.instance, a.version, a.mode, now))
            return
        self._send_load(a.instance, a.version, a.mode, now)

    def _send_load(self, inst: int, version: int, mode: str, t_start: float) -> None:
        src = self.weights[version]
        eng = self.engines[inst]
        hit = next((x for x in self.inject_load if x[0] == inst and version >= x[1]), None)
        if hit is not None:  # fault injection: the weights arrive cut short
            self.inject_load.remove(hit)
            src = cut_last_tensor(self.ray.get(src))
        if self.cfg.rollout.weight_sync == "tensors":
            fut = eng.load_weights.remote(version, src, mode)
        else:
            fut = eng.load_checkpoint.remote(version, src, mode)
        self.loads[fut] = (inst, version, mode, t_start)

    # ---- completions ----------------------------------------------------------------------------------
    def _on_result(self, inst: int, r) -> None:
        traj = int(r.request_id)
        if traj not in self.seg:
            return  # aborted or migrated away: its stop was logged already
        now = self.now()
        if r.finish_reason == "abort":  # handed back unrun (its version can never load there)
            self._end_segment(traj, "lost", len(r.token_ids), now, r.version, detail="engine returned it")
            self.where.pop(traj, None)
            self.deliver(E.TrajectoryLost(traj, inst, "engine"))
            return
        seg_version = r.versions[-1] if r.versions else r.version
        if r.t_submit > 0 and r.t_finish > 0:
            w = self.t0_wall
            self.requests.append((inst, self.seg[traj][0], r.t_submit - w, (r.t_first_token or r.t_finish) - w,
                                  r.t_finish - w, now, len(r.token_ids) - self.seg[traj][1]))
        self._end_segment(traj, "finish", len(r.token_ids), now, seg_version)
        self.where.pop(traj, None)
        self.results[traj] = r
        self.fin_t[traj] = now
        self.last_fin_t = now
        self.fin_inst[traj] = inst
        self.deliver(E.TrajectoryFinished(traj, inst, len(r.token_ids)))

    def _on_loaded(self, inst: int, version: int, mode: str, t_start: float) -> None:
        now = self.now()
        if mode == "interrupt":  # in-flight requests went on under `version` after a re-prefill
            view = self.policy.view
            for traj in [t for t, w in self.where.items() if w == inst and t in self.seg]:
                old_version = view.trajs[traj].version  # the policy learns of the load below
                if old_version == version:
                    continue
                try:
                    part = self.ray.get(self.engines[inst].peek.remote(str(traj)))
                except self.dead_errors as e:  # it died right after loading: the failure path takes over
                    self.dying[inst] = f"actor died ({type(e).__name__})"
                    return
                if part is None:
                    continue  # finished before the load: its result is on the way
                old = sum(1 for v in part.versions if v != version)
                self._end_segment(traj, "interrupt", old, t_start, old_version)
                self.seg[traj] = (t_start, old)
                self.log.add(t_start, "resume", inst, traj, self.meta[traj][0], version,
                             tokens=len(part.prompt_ids) + old)
        self.log.add(now, "load_end", inst, version=version, detail=mode, dur_s=now - t_start)
        self.held[inst] = version
        self.deliver(E.WeightsLoaded(inst, version))

    def kv_in_use(self, instances: tuple[int, ...]) -> tuple[int, ...]:
        """These engines' KV-cache tokens in use (0 for a dead one)."""
        refs = {i: self.engines[i].kv_in_use.remote() for i in instances
                if i not in self.dead and i not in self.dying}
        used = []
        for i in instances:
            n = 0
            if i in refs:
                try:
                    n = self.ray.get(refs[i])
                except self.dead_errors as e:
                    self.dying[i] = f"actor died ({type(e).__name__})"
            used.append(n)
        return tuple(used)

    # ---- main loop ------------------------------------------------------------------------------------
    def _poll(self) -> bool:
        live = [i for i in range(len(self.engines)) if i not in self.dead and i not in self.dying]
        refs = [(i, self.engines[i].poll.remote(0.02)) for i in live]
        did = False
        for inst, ref in refs:
            try:
                results = self.ray.get(ref)
            except self.dead_errors as e:
                self.dying[inst] = f"actor died ({type(e).__name__})"
                continue
            for r in results:
                did = True
                self._on_result(inst, r)
        return did

    def run(self) -> None:
        ray = self.ray  # Ray, or dora.exec.local_runtime.LocalRuntime
        specs = tuple(E.InstanceSpec(i, self.slots, self.cfg.rollout.max_model_len * self.slots, 1)
                      for i in range(len(self.engines)))
        self.t0 = time.perf_counter()
        self.t0_wall = wall_at(self.t0)
        self.deliver(E.ClusterStarted(specs, 1))
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
            if waiting:
                ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
                for ref in ready:
                    did = True
                    if ref in self.loads:
                        inst, version, mode, t_start = self.loads.pop(ref)
                        try:
                            ray.get(ref)
                        except self.dead_errors as e:
                            self.dying[inst] = f"actor died ({type(e).__name__})"
                            continue
                        except (EngineBusyError, ValueError):
                            raise  # a scheduling bug, not a fault
                        except Exception as e:  # noqa: BLE001 - the load failed: retry or retire
                            self._load_failed(inst, version, mode, t_start, e)
                            continue
                        self._on_loaded(inst, version, mode, t_start)
                    elif ref in self.recovering:
                        self._on_recovered(ref, *self.recovering.pop(ref))
                    elif any(ref is f for f, _ in self.saves):
                        version = next(v for f, v in self.saves if f is ref)
                        self.saves = [(f, v) for f, v in self.saves if f is not ref]
                        try:
                            ray.get(ref)
                        except self.dead_errors:
                            continue  # the trainer died while saving: the previous checkpoint stands
                        self.ckpt_version = max(self.ckpt_version, version)
                        for v in [v for v in self.batches if v <= self.ckpt_version]:
                            del self.batches[v]  # a restart never goes back past this checkpoint
                    else:
                        fut, t_start, rows, tokens = self.train_job
                        try:
                            stats = ray.get(fut)
                        except self.dead_errors as e:
                            if self.start_trainer is None:
                                raise
                            self._restart_trainer(f"trainer actor died ({type(e).__name__})")
                            continue
                        if self.restarting is not None:
                            stats, info = stats
                            t_start = self._on_redone(info, float(stats.get("step_time_s", 0.0)))
                        self.train_job = None
                        self._on_trained(stats, t_start, rows, tokens)
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

    def _finish(self) -> None:
        """Stop what is still generating ('end' rows) and record what the scheduler still holds."""
        now = self.now()
        for traj in list(self.seg):
            part = self._abort_on_engine(traj) or None
            n = len(part.token_ids) if part is not None else self.seg[traj][1]
            version = part.version if part is not None else self.policy.view.trajs[traj].version
            self._end_segment(traj, "end", n, now, version)
        self.close_log(self.policy.view, now, self.version)
        for fut in list(self.loads) + list(self.recovering) + [f for f, _ in self.saves]:
            try:
                self.ray.get(fut)
            except Exception:  # noqa: BLE001 - the run is over; a load or save cut short no longer matters
                pass
