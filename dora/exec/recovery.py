"""The executor's fault path, beside its normal path (`dora.exec.rollout`, `dora.exec.training`): a dead engine
actor, a replacement coming back, a failed weight load, a dead trainer restarted from its
checkpoint. A mixin of the orchestrator: it reads and writes the orchestrator's state.

A dead engine actor (any call raising RayActorError) becomes a `fail` row, `lost` rows for its
live trajectories, and InstanceFailed / TrajectoryLost for the policy, as in the simulator; a
replacement actor may come back (`recover`). A weight load that raises is retried (`load_fail`)
or the instance retired. A dead trainer is restarted from its last checkpoint, re-trains the
batches consumed since, and redoes the cut step (`trainer_restart`), so each group is trained
once. Injected faults (`dora/exec/faults.py`) come through the same paths.
"""

from __future__ import annotations

import sys

from dora.body import Tracked, instance_row, load_row, trainer_row
from dora.exec.engine.records import EngineStateLost
from dora.sched import events as E


class TrainerLost(RuntimeError):
    """A trainer call failed because a trainer rank died; `why` is the diagnosis (`_trainer_death`),
    carried so that the caller deciding on a restart does not ask the trainer again."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Recovery:
    """Fault handling for `Orchestrator` (which defines every attribute used here)."""

    def _live_on(self, inst: int) -> list[Tracked]:
        return [t for t in self.live.values() if t.instance == inst]

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
        instance_row(self.log, now, "fail", inst, detail=why)
        lost = self._live_on(inst)
        view = self.policy.view
        for t in lost:  # what they generated died with the actor: the segment ends with its tokens unknown
            self._end_segment(t, "lost", t.before, now, view.trajs[t.traj].version, detail="instance failure")
            del self.live[t.traj]
        for fut in [f for f, v in self.loads.items() if v[0] == inst]:
            del self.loads[fut]
        self.deliver(E.InstanceFailed(inst))
        for t in lost:
            self.deliver(E.TrajectoryLost(t.traj, inst, "instance failure"))
        if self.faults.restart_instances and self.start_engine is not None and inst not in self.no_restart:
            eng = self.start_engine(inst)
            self.engines[inst] = eng
            self.recovering[eng.ready.remote()] = (inst, -1, now)  # then it loads the newest version
        if len(self.dead) == len(self.engines) and not self.recovering:
            raise RuntimeError(f"policy {self.name}: every rollout instance has failed (the last: instance {inst}, "
                               f"{why})")

    def _on_recovered(self, fut, inst: int, version: int, t_start: float) -> None:
        """A replacement actor is up (version -1: then it loads the newest published version) or
        has loaded `version`: the instance is back."""
        try:
            self.ray.get(fut)
        except Exception as e:  # noqa: BLE001 - the replacement failed too: the instance stays down
            self.no_restart.add(inst)
            instance_row(self.log, self.now(), "fail", inst, detail=f"replacement failed: {type(e).__name__}")
            return
        if version < 0 and self.version > 0:
            eng, v = self.engines[inst], self.version
            if self.cfg.rollout.weight_sync == "collective":  # it needs the newest version sent first
                self._catch_up(inst, t_start)
                return
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
        instance_row(self.log, now, "recover", inst, version, dur_s=now - t_start)
        self.deliver(E.InstanceRecovered(inst, version))

    def _load_failed(self, inst: int, version: int, mode: str, t_start: float, err: BaseException) -> None:
        """Retry a failed load with intact weights, or retire the instance after load_retries failures."""
        now = self.now()
        n = self.load_failures[(inst, version)] = self.load_failures.get((inst, version), 0) + 1
        msg = " ".join(str(err).split())[:160]
        load_row(self.log, now, "load_fail", inst, version, f"{mode}: {type(err).__name__}: {msg}", now - t_start)
        lost = isinstance(err, EngineStateLost)  # the backend cannot redo a load: no retry
        if not lost and n <= self.faults.load_retries and version in self.weights:
            self._send_load(inst, version, mode, t_start)
            return
        self.retired.add(inst)
        self.ray.kill(self.engines[inst])
        why = "its engine cannot redo a load" if lost else f"{n} failed attempts"
        self._instance_died(inst, f"retired: loading version {version} failed ({why})")

    def _trainer_death(self, e: BaseException) -> str:
        """How the trainer died, if error `e` of one of its calls means a rank died (its actor, or a
        peer whose death made rank 0's collective fail); '' otherwise."""
        if isinstance(e, TrainerLost):
            return e.why
        if isinstance(e, self.dead_errors):
            return f"trainer actor died ({type(e).__name__})"
        return self.trainer.dead_rank(self.dead_errors, wait_s=30.0)

    def _trainer_lost(self, e: BaseException) -> str:
        """`_trainer_death`, where a new trainer can be started; '' (the error stands) otherwise."""
        return self._trainer_death(e) if self.start_trainer is not None else ""

    def _restart_trainer(self, why: str) -> None:
        """A new trainer (every rank: a group that lost one is not repaired) resumes from the last
        checkpoint, re-trains what was consumed since and redoes the cut step (one call, so rollout
        goes on meanwhile); checked in _on_redone."""
        t = self.now()
        _, _, rows, tokens = self.train_job
        step = self.version + 1
        self.trainer.kill()  # every rank: a new group replaces the whole group
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
        trainer_row(self.log, t, "trainer_restart", self.version, dur_s=max(began - t, 0.0), detail=detail)
        self.restarts.append({"t_s": t, "checkpoint": ckpt, "replayed": info["replayed"], "step": step,
                              "restart_s": began - t, "resume_s": info["resume_s"]})
        if self.progress:
            print(f"  [{self.name}] trainer restarted ({detail}): back after {began - t:.1f} s",
                  file=sys.stderr, flush=True)
        return began
