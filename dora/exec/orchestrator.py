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

Faults (dora/exec/faults.py): a dead engine actor (any call raising RayActorError) becomes a
`fail` row, `lost` rows for its live trajectories, and InstanceFailed / TrajectoryLost for
the policy, as in the simulator; a replacement actor may come back (`recover`). A weight load
that raises is retried (`load_fail`) or the instance retired. A dead trainer is restarted from
its last checkpoint, re-trains the batches consumed since, and redoes the cut step
(`trainer_restart`), so each group is trained once.
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dora.errors import InputError
from dora.eventlog import EventLog
from dora.exec.engine.base import EngineBusyError, EngineStateLost
from dora.exec.faults import actor_errors, cut_last_tensor
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


@dataclass
class ExecResult:
    policy: str
    config: dict
    metrics: dict
    events: Any  # pandas DataFrame
    trace_rows: list[dict]
    steps: list[dict]
    profile: dict | None = None  # dora.profile: timings for calibration


class TrainerActor:
    """Ray actor body around dora.exec.trainer.Trainer."""

    def __init__(self, model: str, cfg, out: str):
        from dora.exec.trainer import Trainer

        self.trainer = Trainer(model, cfg)
        self.out = Path(out)

    def step(self, batch) -> dict:
        return self.trainer.step(batch)

    def weights(self) -> dict:
        return self.trainer.state_dict_for_publish()

    def save_weights(self, version: int) -> str:
        return str(self.trainer.save_weights(self.out / "weights" / f"v{version}"))

    def save_checkpoint(self, data_state: dict | None = None) -> str:
        return str(self.trainer.save_checkpoint(self.out / "checkpoint", data_state=data_state))

    def resume(self) -> dict:
        """Load the last checkpoint if there is one; its data-consumption state (version 0 and
        nothing trained when there is none: the trainer starts from the model itself)."""
        from dora.exec.trainer import latest_checkpoint, read_data_state

        ckpt = latest_checkpoint(self.out / "checkpoint")
        if ckpt is None:
            return {"version": 0, "trained_groups": []}
        self.trainer.load_checkpoint(ckpt)
        state = read_data_state(ckpt)
        if state.get("version") != self.trainer.version:
            raise RuntimeError(f"checkpoint {ckpt}: data state of version {state.get('version')} beside trainer "
                               f"version {self.trainer.version}")
        return state

    def resume_and_step(self, batches: dict[int, list], step: int) -> tuple[dict, dict]:
        """After a restart: load the last checkpoint (version c), re-train the batches of steps
        c+1..step-1 in order (their versions were published already), then train `step`'s batch.
        `batches` holds every step's batch the checkpoint may be missing. Returns the step's
        stats and {checkpoint, replayed, trained_groups (the checkpoint's), resume_s}."""
        t0 = time.perf_counter()
        state = self.resume()
        ckpt = int(state["version"])
        for v in range(ckpt + 1, step):
            self.trainer.step(batches[v])
        info = {"checkpoint": ckpt, "replayed": step - 1 - ckpt, "trained_groups": state["trained_groups"],
                "resume_s": time.perf_counter() - t0}
        return self.trainer.step(batches[step]), info


class Orchestrator:
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
        self.run_info = {
            "policy": name, "model": cfg.model, "eta": pc.eta, "batch_size": pc.batch_size, "group_size": pc.group_size,
            "steps": cfg.steps, "instances": r.instances, "devices_per_instance": 1, "rollout_devices": r.instances,
            "trainer_devices": 1, "colocated": False, "elastic_instances": [], "max_seqs": r.max_num_seqs,
            "backend": r.backend, "body": "exec",
        }
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

    def apply(self, a: A.Action) -> None:
        t = type(a)
        now = self.now()
        if t is A.SampleGroups:
            specs = []
            G = self.cfg.policy.group_size
            for _ in range(a.count):
                k = self.next_draw % len(self.examples)
                pid = self.next_draw
                self.next_draw += 1
                self.example_of[pid] = k
                self.drawn_at[pid] = self.version
                specs.append(E.GroupSpec(pid, G, len(self.prompt_ids[k])))
                self.log.add(now, "sample", prompt_id=pid, tokens=G, detail=a.reason)
            self.deliver(E.GroupsSampled(tuple(specs)))
        elif t is A.Dispatch:
            self._dispatch(a, now)
        elif t is A.Migrate:
            self._migrate(a, now)
        elif t is A.Abort:
            self._abort(a, now)
        elif t is A.RegenerateGroup:
            self.log.add(now, "regenerate", prompt_id=a.prompt_id, tokens=self.cfg.policy.group_size, detail=a.reason)
        elif t is A.LoadVersion:
            self._load(a, now)
        elif t is A.Train:
            self._train(a, now)
        elif t is A.ReadKV:
            self.deliver(E.KVRead(a.instances, self._kv_in_use(a.instances)))
        else:
            raise TypeError(f"unknown action {a!r}")

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

    def _train(self, a: A.Train, now: float) -> None:
        from dora.exec.trainer import Trajectory

        batch, rows = [], []
        for traj in a.trajs:
            r = self.results[traj]
            pid, sidx, t_disp = self.meta[traj]
            ex = self.examples[self.example_of[pid]]
            text = self.tok.decode(r.token_ids, skip_special_tokens=True)
            reward = float(self.reward_fn(text, ex.answer))
            gen_version = r.versions[0] if r.versions else r.version
            del self.results[traj]
            batch.append(Trajectory(list(r.prompt_ids), list(r.token_ids), list(r.logprobs), gen_version, pid, reward,
                                    trajectory_id=traj, finish_reason=r.finish_reason))
            self.log.add(now, "train", -1, traj, pid, gen_version, self.version, tokens=len(r.token_ids))
            rows.append({"prompt_id": pid, "sample_idx": sidx, "prompt_len": len(r.prompt_ids),
                         "response_len": len(r.token_ids), "finish_reason": "length" if r.finish_reason == "length"
                         else "stop", "reward": reward, "version": gen_version, "instance": self.fin_inst.get(traj, -1),
                         "t_start_s": t_disp, "t_end_s": self.fin_t.get(traj, now),
                         "step": self.drawn_at.get(pid, self.version)})
        tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in batch)
        self.log.add(now, "train_start", trainer_version=self.version, tokens=tokens)
        self.batches[self.version + 1] = batch
        self.trained_at[self.version + 1] = list(a.prompt_ids)
        self.train_job = (self.trainer.step.remote(batch), now, rows, tokens)
        if self.faults.kill_trainer_at_step == self.version + 1 and not self.killed_trainer:
            self.killed_trainer = True  # fault injection: the trainer dies during this step
            self.ray.kill(self.trainer)

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

    def _on_trained(self, stats: dict, t_start: float, rows: list[dict], tokens: int) -> None:
        now = self.now()
        self.log.add(now, "train_end", trainer_version=self.version, tokens=tokens, dur_s=now - t_start,
                     busy_s=now - t_start)
        self.version += 1
        if self.cfg.rollout.weight_sync == "tensors":
            ref = self.trainer.weights.remote()
            self.ray.wait([ref])
        else:
            ref = self.ray.get(self.trainer.save_weights.remote(self.version))
        self.weights[self.version] = ref
        self.pub_t[self.version] = self.now()
        for old in [v for v in self.weights if v < self.version - self.cfg.policy.eta - 1]:
            del self.weights[old]
        pub = self.now()
        self.log.add(pub, "publish", version=self.version, trainer_version=self.version, dur_s=pub - now)
        every = self.cfg.checkpoint_every
        if every > 0 and self.version % every == 0 and self.version < self.cfg.steps:
            # queued on the trainer before its next step; written to a temporary dir and renamed
            self.saves.append((self.trainer.save_checkpoint.remote(self.data_state()), self.version))
        self.trace_rows.extend(rows)
        step_s = pub - self.last_pub
        self.last_pub = pub
        row = {"step": self.version, "t_s": pub, "step_time_s": step_s, **{k: float(v) for k, v in stats.items()}}
        self.step_rows.append(row)
        if self.progress:
            from dora.metrics import compute_metrics

            bubble = compute_metrics(self.log.to_frame(), self.run_info)["bubble_ratio"]  # so far
            print(f"  [{self.name}] step {self.version}/{self.cfg.steps}  reward {stats.get('reward_mean', 0):.3f}  "
                  f"staleness {stats.get('staleness_mean', 0):.2f} (max {stats.get('staleness_max', 0):.0f})  "
                  f"resp {stats.get('response_len_mean', 0):.1f} tok  {len(rows) / max(step_s, 1e-9):.2f} samples/s  "
                  f"bubble {bubble:.2f}  "
                  f"wall {pub:.1f} s", file=sys.stderr, flush=True)
        if self.version < self.cfg.steps:
            self.deliver(E.VersionPublished(self.version))

    def data_state(self) -> dict:
        """The driver's data-consumption state at the current version (saved with a checkpoint)."""
        v = self.policy.view
        return {"version": self.version, "next_draw": self.next_draw,
                "trained_groups": sorted(p for ver, ps in self.trained_at.items() if ver <= self.version for p in ps),
                "buffer": sorted(int(p) for p in v.buffer), "policy": self.name}

    def _kv_in_use(self, instances: tuple[int, ...]) -> tuple[int, ...]:
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

    # ---- faults -----------------------------------------------------------------------------------------
    def _live_on(self, inst: int) -> list[int]:
        return [t for t, w in self.where.items() if w == inst and t in self.seg]

    def _maybe_kill_instance(self) -> None:
        fa = self.faults
        if self.killed_instance or fa.kill_instance_at_step < 0 or self.version < fa.kill_instance_at_step:
            return
        if self.last_fin_t < self.pub_t[fa.kill_instance_at_step]:
            return  # mid-generation: once a trajectory of this step has finished somewhere
        inst = fa.kill_instance
        if inst in self.dead or not self._live_on(inst):
            return  # and while the instance holds live trajectories, so that the kill loses some
        self.killed_instance = True
        self.injected_dead.add(inst)
        self.ray.kill(self.engines[inst])

    def _instance_died(self, inst: int, why: str) -> None:
        """A dead actor: its live trajectories are lost; the policy hears it as in the simulator."""
        now = self.now()
        self.dead.add(inst)
        self.held[inst] = -1
        if inst in self.injected_dead:
            why += ", injected kill"
        self.log.add(now, "fail", inst, detail=why)
        lost = self._live_on(inst)
        view = self.policy.view
        for traj in lost:  # what they generated died with the actor: the segment ends with its tokens unknown
            self._end_segment(traj, "lost", self.seg[traj][1], now, view.trajs[traj].version,
                              detail="instance failure")
            self.where.pop(traj, None)
        for fut in [f for f, v in self.loads.items() if v[0] == inst]:
            del self.loads[fut]
        self.deliver(E.InstanceFailed(inst))
        for traj in lost:
            self.deliver(E.TrajectoryLost(traj, inst, "instance failure"))
        if self.faults.restart_instances and self.start_engine is not None and inst not in self.no_restart:
            eng = self.start_engine(inst)
            self.engines[inst] = eng
            self.recovering[eng.ready.remote()] = (inst, -1, now)  # then it loads the newest version
        if len(self.dead) == len(self.engines) and not self.recovering:
            raise RuntimeError(f"policy {self.name}: every rollout instance has failed")

    def _on_recovered(self, fut, inst: int, version: int, t_start: float) -> None:
        """A replacement actor is up (version -1: then it loads the newest published version) or
        has loaded `version`: the instance is back."""
        try:
            self.ray.get(fut)
        except Exception as e:  # noqa: BLE001 - the replacement failed too: the instance stays down
            self.no_restart.add(inst)
            self.log.add(self.now(), "fail", inst, detail=f"replacement failed: {type(e).__name__}")
            return
        if version < 0 and self.version > 0:
            eng, v = self.engines[inst], self.version
            if self.cfg.rollout.weight_sync == "tensors":
                nxt = eng.load_weights.remote(v, self.weights[v], "drain")
            else:
                nxt = eng.load_checkpoint.remote(v, self.weights[v], "drain")
            self.recovering[nxt] = (inst, v, t_start)
            return
        version = max(version, 0)
        now = self.now()
        self.dead.discard(inst)
        self.held[inst] = version
        self.log.add(now, "recover", inst, version=version, dur_s=now - t_start)
        self.deliver(E.InstanceRecovered(inst, version))

    def _load_failed(self, inst: int, version: int, mode: str, t_start: float, err: BaseException) -> None:
        """Retry a failed load with intact weights, or retire the instance after load_retries failures."""
        now = self.now()
        n = self.load_failures[(inst, version)] = self.load_failures.get((inst, version), 0) + 1
        msg = " ".join(str(err).split())[:160]
        self.log.add(now, "load_fail", inst, version=version, detail=f"{mode}: {type(err).__name__}: {msg}",
                     dur_s=now - t_start)
        lost = isinstance(err, EngineStateLost)  # the backend cannot redo a load: no retry
        if not lost and n <= self.faults.load_retries and version in self.weights:
            self._send_load(inst, version, mode, t_start)
            return
        self.retired.add(inst)
        self.ray.kill(self.engines[inst])
        why = "its engine cannot redo a load" if lost else f"{n} failed attempts"
        self._instance_died(inst, f"retired: loading version {version} failed ({why})")

    def _restart_trainer(self, why: str) -> None:
        """A new trainer actor resumes from the last checkpoint, re-trains what was consumed since
        and redoes the cut step (one call, so rollout goes on meanwhile); checked in _on_redone."""
        t = self.now()
        _, _, rows, tokens = self.train_job
        step = self.version + 1
        self.ray.kill(self.trainer)
        self.trainer = self.start_trainer()
        since = {v: self.batches[v] for v in range(self.ckpt_version + 1, step + 1)}
        fut = self.trainer.resume_and_step.remote(since, step)
        self.train_job = (fut, t, rows, tokens)
        self.restarting = (t, why, step)

    def _on_redone(self, info: dict, step_time_s: float) -> float:
        """The restarted trainer's report: check exactly-once consumption, log `trainer_restart`;
        returns when the redone step began (for its train_end row)."""
        t, why, step = self.restarting
        self.restarting = None
        ckpt = int(info["checkpoint"])
        # exactly once: the checkpoint's groups + the re-trained ones are every group trained so far, each once
        done = [p for v in range(1, step) for p in self.trained_at[v]]
        again = [p for v in range(ckpt + 1, step) for p in self.trained_at[v]]
        if sorted(info["trained_groups"] + again) != sorted(done) or len(set(done + self.trained_at[step])) != \
                len(done) + len(self.trained_at[step]):
            raise RuntimeError(f"trainer restart: checkpoint v{ckpt} + re-trained steps do not hold the groups "
                               f"trained so far exactly once")
        began = self.now() - step_time_s
        detail = f"train: {why}; checkpoint v{ckpt}, re-trained {info['replayed']} steps, redo step {step}"
        self.log.add(t, "trainer_restart", trainer_version=self.version, dur_s=max(began - t, 0.0), detail=detail)
        self.restarts.append({"t_s": t, "checkpoint": ckpt, "replayed": info["replayed"], "step": step,
                              "restart_s": began - t, "resume_s": info["resume_s"]})
        if self.progress:
            print(f"  [{self.name}] trainer restarted ({detail}): back after {began - t:.1f} s",
                  file=sys.stderr, flush=True)
        return began

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
        for tid, pid, version, size, state in self.policy.view.leftovers():
            self.log.add(now, "leftover", traj=tid, prompt_id=pid, version=version, tokens=size, detail=state)
        self.log.add(now, "run_end", trainer_version=self.version)
        for fut in list(self.loads) + list(self.recovering) + [f for f, _ in self.saves]:
            try:
                self.ray.get(fut)
            except Exception:  # noqa: BLE001 - the run is over; a load or save cut short no longer matters
                pass


def run_policies(cfg: ExecConfig, progress: bool = True) -> list[ExecResult]:
    """Start the runtime (Ray, or in-process with runtime 'local'), then for each policy in turn
    its engines and a trainer, and run it on the same task."""
    from transformers import AutoTokenizer

    from dora.exec.engine import EngineConfig
    from dora.exec.engine.actor import EngineActor
    from dora.metrics import compute_metrics

    r = cfg.rollout
    try:
        tok = AutoTokenizer.from_pretrained(cfg.model)
    except OSError as e:
        raise InputError(f"model {cfg.model}: cannot load its tokenizer ({type(e).__name__}); pass a local "
                         "checkpoint directory (python -m dora.exec.tiny_model --out DIR) or a hub id") from None
    from dora.exec.tasks import examples_for_task

    examples = examples_for_task(cfg.task)
    if cfg.runtime == "local":
        from dora.exec.local_runtime import LocalActor, LocalRuntime

        ray = LocalRuntime()
        gpu = 0.0

        # one after the other: transformers' model loading is not safe in concurrent threads
        def start_engine(ecfg: EngineConfig, i: int):
            return LocalActor(EngineActor, ecfg, i, threads=4).wait_built()

        def start_trainer(run_dir: Path):
            return LocalActor(TrainerActor, cfg.model, cfg.trainer, str(run_dir)).wait_built()
    else:
        import ray

        from dora.exec.engine.actor import remote_engine

        if not ray.is_initialized():
            if cfg.ray_address:
                ray.init(address=cfg.ray_address, log_to_driver=False)
            else:
                ray.init(num_cpus=max(os.cpu_count() or 1, r.instances + 2), include_dashboard=False,
                         log_to_driver=False)
        # on a GPU box the engines and the trainer share the GPUs there are (fractions of one, or one each)
        gpus = ray.cluster_resources().get("GPU", 0)
        gpu = min(1.0, gpus / (r.instances + 1)) if gpus else 0

        def start_engine(ecfg: EngineConfig, i: int):
            return remote_engine(ecfg, instance=i, num_cpus=1, num_gpus=gpu)

        def start_trainer(run_dir: Path):
            return ray.remote(TrainerActor).options(num_cpus=1, num_gpus=gpu).remote(cfg.model, cfg.trainer,
                                                                                     str(run_dir))
    def engine_config(i: int) -> EngineConfig:
        return EngineConfig(model=cfg.model, backend=r.backend, device=r.device, dtype=r.dtype,
                            max_num_seqs=r.max_num_seqs, max_model_len=r.max_model_len, seed=cfg.seed + i,
                            cpu_threads=r.cpu_threads, kv_cache_bytes=r.kv_cache_bytes)

    out: list[ExecResult] = []
    for name in cfg.policies:
        run_dir = Path(cfg.out) / name
        engines = [start_engine(engine_config(i), i) for i in range(r.instances)]
        trainer = start_trainer(run_dir)
        ray.get([e.ready.remote() for e in engines])
        if progress:
            print(f"running {name}: {r.instances} {r.backend} engines + trainer ready", file=sys.stderr, flush=True)
        orch = Orchestrator(cfg, name, engines, trainer, tok, examples, progress, runtime=ray,
                            start_engine=lambda i: start_engine(engine_config(i), i),
                            start_trainer=lambda d=run_dir: start_trainer(d))
        orch.run()
        ray.get(orch.trainer.save_checkpoint.remote(orch.data_state()))
        alive = [i for i in range(len(orch.engines)) if i not in orch.dead]
        stats_of = dict(zip(alive, ray.get([orch.engines[i].stats.remote() for i in alive])))
        engine_stats = [stats_of.get(i, {}) for i in range(len(orch.engines))]
        for i in alive:
            ray.get(orch.engines[i].close.remote())
        for e in orch.engines:
            ray.kill(e)
        ray.kill(orch.trainer)
        df = orch.log.to_frame().sort_values("t_s", kind="stable").reset_index(drop=True)
        df.attrs["run"] = orch.run_info
        metrics = compute_metrics(df, orch.run_info)
        metrics["wall_s"] = orch.now()
        metrics["reward_final"] = orch.step_rows[-1].get("reward_mean", float("nan")) if orch.step_rows else float("nan")
        _write_steps_csv(run_dir / "steps.csv", orch.step_rows)
        from dora.profile import build_profile, write_profile

        profile = build_profile(df, engine_stats, orch.run_info, orch.requests)
        profile["wall_s"] = metrics["wall_s"]
        profile["host_loadavg_1m"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0  # shared-host check
        profile["host_cpus"] = os.cpu_count() or 0
        profile["t0_wall_s"] = orch.t0_wall
        write_profile(profile, run_dir / "profile.json")
        config = {k: v for k, v in orch.run_info.items() if k not in ("policy", "body")}
        from dora.config import to_dict

        config.update(seed=cfg.seed, rollout=to_dict(cfg.rollout), trainer=to_dict(cfg.trainer), task=to_dict(cfg.task),
                      policy=orch.policy.config_dict(), checkpoint_every=cfg.checkpoint_every,
                      faults=to_dict(cfg.faults))
        out.append(ExecResult(name, config, metrics, df, orch.trace_rows, orch.step_rows, profile))
    return out


def _write_steps_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)

