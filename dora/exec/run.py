"""Running policies on live engines: start the runtime (Ray, or in-process), each policy's
engines and trainer, drive them with an `Orchestrator`, and gather its results (metrics,
profile, per-step CSV)."""

from __future__ import annotations

import csv
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from dora.body import RunResult
from dora.errors import InputError
from dora.exec.orchestrator import Orchestrator
from dora.exec.run_config import ExecConfig
from dora.exec.trainer_actor import TrainerActor
from dora.exec.trainer_group import TrainerGroup


@dataclass
class ExecResult(RunResult):
    """A real run: `RunResult` plus its trained trajectories (trace rows), per-step rows and profile."""

    trace_rows: list[dict]
    steps: list[dict]
    profile: dict | None = None  # dora.profile: timings for calibration


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
    ranks = cfg.trainer.ranks
    if cfg.runtime == "local":
        from dora.exec.local_runtime import LocalActor, LocalRuntime

        ray = LocalRuntime()
        gpu = 0.0

        # one after the other: transformers' model loading is not safe in concurrent threads
        def start_engine(ecfg: EngineConfig, i: int):
            return LocalActor(EngineActor, ecfg, i, threads=4).wait_built()

        def start_trainer(run_dir: Path):  # one rank (ExecConfig refuses more with runtime local)
            return TrainerGroup([LocalActor(TrainerActor, cfg.model, cfg.trainer, str(run_dir)).wait_built()], ray)
    else:
        import ray

        from dora.exec.engine.actor import remote_engine

        if not ray.is_initialized():
            if cfg.ray_address:
                ray.init(address=cfg.ray_address, log_to_driver=False)
            else:
                ray.init(num_cpus=max(os.cpu_count() or 1, r.instances + ranks + 1), include_dashboard=False,
                         log_to_driver=False)
        # on a GPU box the engines and the trainer's ranks share the GPUs there are (fractions of one, or one each)
        gpus = ray.cluster_resources().get("GPU", 0)
        gpu = min(1.0, gpus / (r.instances + ranks)) if gpus else 0
        if ranks > 1 and 0 < gpu < 1:
            raise InputError(f"trainer.ranks: {ranks} NCCL ranks need a GPU each, and {gpus:g} GPUs for "
                             f"{r.instances} engines + {ranks} ranks give {gpu:.2f}; lower trainer.ranks or "
                             "rollout.instances, or add GPUs")

        def start_engine(ecfg: EngineConfig, i: int):
            return remote_engine(ecfg, instance=i, num_cpus=1, num_gpus=gpu)

        def start_trainer(run_dir: Path):
            return TrainerGroup.start(ray, TrainerActor, cfg.model, cfg.trainer, str(run_dir), ranks=ranks, num_cpus=1,
                                      num_gpus=gpu)
    kv_store = ""
    if r.kv_connector:  # one store for the run's engines (vllm_kv): cleared of what a crash left
        kv_store = str(Path(cfg.out).resolve() / "kv_store")
        shutil.rmtree(kv_store, ignore_errors=True)
        os.makedirs(kv_store)

    def engine_config(i: int) -> EngineConfig:
        return EngineConfig(model=cfg.model, backend=r.backend, device=r.device, dtype=r.dtype,
                            max_num_seqs=r.max_num_seqs, max_model_len=r.max_model_len, seed=cfg.seed + i,
                            cpu_threads=r.cpu_threads, kv_cache_bytes=r.kv_cache_bytes, kv_store=kv_store)

    out: list[ExecResult] = []
    for name in cfg.policies:
        run_dir = Path(cfg.out) / name
        engines = [start_engine(engine_config(i), i) for i in range(r.instances)]
        trainer = start_trainer(run_dir)
        ray.get([e.ready.remote() for e in engines])
        if progress:
            print(f"running {name}: {r.instances} {r.backend} engines + trainer ready", file=sys.stderr, flush=True)
            if ranks > 1:
                from dora.exec.trainer_group import backend_for

                print(f"  trainer: {ranks} ranks in one {backend_for(cfg.trainer.device)} group, FSDP2-sharded",
                      file=sys.stderr, flush=True)
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
        orch.trainer.kill()
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
