"""The real cluster: Ray actors (rollout engines, trainer) driven by a `dora/sched` policy.

The driver owns the clock (wall seconds since start) and translates between the policy's
events/actions and the actors, writing the same event log as the simulator:

  SampleGroups   -> draw prompt groups from the task, `sample` rows, GroupsSampled
  Dispatch       -> GenRequest to the engine (held there until its version is loaded)
  Migrate        -> abort on the source, resume prompt + generated tokens on the destination
                    (no KV transfer between engines yet: the re-prefill is logged)
  Abort          -> abort on the engine; its tokens are waste
  LoadVersion    -> the trainer's weights for that version, loaded in-process ('drain' or
                    'interrupt': continue in-flight requests under the new version)
  Train          -> the groups' trajectories with rewards to the trainer actor; on return,
                    publish the new version (tensors through the Ray object store, or a
                    checkpoint directory) and deliver VersionPublished

A decode slot's share of the instance is charged to each segment (busy_s = seconds held ×
devices / max_num_seqs), so bubble ratios are computed by the same code as in simulation.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dora.errors import InputError
from dora.eventlog import EventLog
from dora.exec.run_config import ExecConfig
from dora.sched import actions as A
from dora.sched import events as E
from dora.sched.policies import POLICIES
from dora.sched.policy import Policy
from dora.sched.record import encode


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

    def save_checkpoint(self) -> str:
        return str(self.trainer.save_checkpoint(self.out / "checkpoint"))


class Orchestrator:
    """Runs one policy for `cfg.steps` trainer steps on live engines; returns its event log."""

    def __init__(self, cfg: ExecConfig, name: str, engines: list, trainer, tokenizer, examples, progress: bool = True,
                 runtime=None):
        if runtime is None:
            import ray as runtime
        self.ray = runtime
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
        inst = self.where[traj]
        (part,) = self.ray.get(self.engines[inst].abort.remote([str(traj)]))
        return part

    def _migrate(self, a: A.Migrate, now: float) -> None:
        from dora.exec.engine import GenRequest

        src = self.where[a.traj]
        part = self._abort_on_engine(a.traj)
        if part is None:
            return  # it finished meanwhile: its result comes with the next poll
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
        self._end_segment(a.traj, "abort", len(part.token_ids), self.now(), part.version, detail=a.reason)
        self.where.pop(a.traj, None)

    def _load(self, a: A.LoadVersion, now: float) -> None:
        if a.mode not in ("drain", "interrupt"):
            raise InputError(f"load mode {a.mode!r}: the engines support 'drain' and 'interrupt' only")
        src = self.weights[a.version]
        self.log.add(now, "load_start", a.instance, version=a.version, detail=a.mode)
        eng = self.engines[a.instance]
        if self.cfg.rollout.weight_sync == "tensors":
            fut = eng.load_weights.remote(a.version, src, a.mode)
        else:
            fut = eng.load_checkpoint.remote(a.version, src, a.mode)
        self.loads[fut] = (a.instance, a.version, a.mode, now)

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
        self.train_job = (self.trainer.step.remote(batch), now, rows, tokens)

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
        self._end_segment(traj, "finish", len(r.token_ids), now, seg_version)
        self.where.pop(traj, None)
        self.results[traj] = r
        self.fin_t[traj] = now
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
                part = self.ray.get(self.engines[inst].peek.remote(str(traj)))
                if part is None:
                    continue  # finished before the load: its result is on the way
                old = sum(1 for v in part.versions if v != version)
                self._end_segment(traj, "interrupt", old, t_start, old_version)
                self.seg[traj] = (t_start, old)
                self.log.add(t_start, "resume", inst, traj, self.meta[traj][0], version,
                             tokens=len(part.prompt_ids) + old)
        self.log.add(now, "load_end", inst, version=version, detail=mode, dur_s=now - t_start)
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
        for old in [v for v in self.weights if v < self.version - self.cfg.policy.eta - 1]:
            del self.weights[old]
        pub = self.now()
        self.log.add(pub, "publish", version=self.version, trainer_version=self.version, dur_s=pub - now)
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

    # ---- main loop ------------------------------------------------------------------------------------
    def run(self) -> None:
        ray = self.ray  # Ray, or dora.exec.local_runtime.LocalRuntime
        specs = tuple(E.InstanceSpec(i, self.slots, self.cfg.rollout.max_model_len * self.slots, 1)
                      for i in range(len(self.engines)))
        self.t0 = time.perf_counter()
        self.deliver(E.ClusterStarted(specs, 1))
        idle_since = time.perf_counter()
        while self.version < self.cfg.steps:
            polled = ray.get([e.poll.remote(0.02) for e in self.engines])
            did = False
            for inst, results in enumerate(polled):
                for r in results:
                    did = True
                    self._on_result(inst, r)
            waiting = list(self.loads)
            if self.train_job is not None:
                waiting.append(self.train_job[0])
            if waiting:
                ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
                for ref in ready:
                    did = True
                    if ref in self.loads:
                        inst, version, mode, t_start = self.loads.pop(ref)
                        ray.get(ref)
                        self._on_loaded(inst, version, mode, t_start)
                    else:
                        fut, t_start, rows, tokens = self.train_job
                        self.train_job = None
                        self._on_trained(ray.get(fut), t_start, rows, tokens)
            if did:
                idle_since = time.perf_counter()
            elif time.perf_counter() - idle_since > 600:
                raise RuntimeError(f"policy {self.name} stalled: nothing happened for 600 s at step {self.version}")
        self._finish()

    def _finish(self) -> None:
        """Stop what is still generating ('end' rows) and record what the scheduler still holds."""
        now = self.now()
        for traj in list(self.seg):
            inst = self.where[traj]
            part = self.ray.get(self.engines[inst].abort.remote([str(traj)]))[0]
            n = len(part.token_ids) if part is not None else self.seg[traj][1]
            version = part.version if part is not None else self.policy.view.trajs[traj].version
            self._end_segment(traj, "end", n, now, version)
        for tid, pid, version, size, state in self.policy.view.leftovers():
            self.log.add(now, "leftover", traj=tid, prompt_id=pid, version=version, tokens=size, detail=state)
        self.log.add(now, "run_end", trainer_version=self.version)
        for fut in list(self.loads):
            self.ray.get(fut)


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
    out: list[ExecResult] = []
    for name in cfg.policies:
        run_dir = Path(cfg.out) / name
        engines = [start_engine(EngineConfig(model=cfg.model, backend=r.backend, device=r.device, dtype=r.dtype,
                                             max_num_seqs=r.max_num_seqs, max_model_len=r.max_model_len,
                                             seed=cfg.seed + i, cpu_threads=r.cpu_threads,
                                             kv_cache_bytes=r.kv_cache_bytes), i) for i in range(r.instances)]
        trainer = start_trainer(run_dir)
        ray.get([e.ready.remote() for e in engines])
        if progress:
            print(f"running {name}: {r.instances} {r.backend} engines + trainer ready", file=sys.stderr, flush=True)
        orch = Orchestrator(cfg, name, engines, trainer, tok, examples, progress, runtime=ray)
        orch.run()
        ray.get(trainer.save_checkpoint.remote())
        engine_stats = ray.get([e.stats.remote() for e in engines])
        for e in engines:
            ray.get(e.close.remote())
            ray.kill(e)
        ray.kill(trainer)
        df = orch.log.to_frame().sort_values("t_s", kind="stable").reset_index(drop=True)
        df.attrs["run"] = orch.run_info
        metrics = compute_metrics(df, orch.run_info)
        metrics["wall_s"] = orch.now()
        metrics["reward_final"] = orch.step_rows[-1].get("reward_mean", float("nan")) if orch.step_rows else float("nan")
        _write_steps_csv(run_dir / "steps.csv", orch.step_rows)
        from dora.profile import build_profile, write_profile

        profile = build_profile(df, engine_stats, orch.run_info)
        profile["wall_s"] = metrics["wall_s"]
        profile["host_loadavg_1m"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0  # shared-host check
        write_profile(profile, run_dir / "profile.json")
        config = {k: v for k, v in orch.run_info.items() if k not in ("policy", "body")}
        from dora.config import to_dict

        config.update(seed=cfg.seed, rollout=to_dict(cfg.rollout), trainer=to_dict(cfg.trainer), task=to_dict(cfg.task),
                      policy=orch.policy.config_dict())
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


def config_with_policy(cfg: ExecConfig, name: str) -> ExecConfig:
    return replace(cfg, policies=[name])
