"""Configuration of a real run (`python -m dora.exec`): typed, YAML-loadable, `--set` overridable."""

from __future__ import annotations

from dataclasses import dataclass, field

from dora.errors import InputError, too_small
from dora.exec.config import TaskConfig, TrainerConfig
from dora.exec.faults import FaultConfig
from dora.sched.config import PolicyConfig
from dora.sched.policies.sync_config import SyncConfig
from dora.sched.registry import check_run



def _exec_policy() -> PolicyConfig:
    # engines and trainer are separate processes here: sync is disaggregated (no device time-sharing)
    return PolicyConfig(eta=2, batch_size=4, group_size=4, sections={"sync": SyncConfig(colocated=False)})


@dataclass
class RolloutConfig:
    """Rollout instances: one engine (one device, or a share of the CPU) each."""

    instances: int = 2
    backend: str = "vllm"  # vllm | hf
    device: str = "auto"  # hf: auto | cpu | cuda (vLLM picks its platform itself)
    max_num_seqs: int = 32  # decode slots per instance
    max_model_len: int = 1024
    dtype: str = "float32"
    temperature: float = 1.0
    cpu_threads: int = 1  # hf on CPU: torch threads per engine process
    kv_cache_bytes: int = 64 * 1024 * 1024  # vllm on CPU
    # collective (broadcast from the trainer at publication, staged on the engines; dora.exec.weight_sync) |
    # tensors (in-memory, via the Ray object store) | checkpoint (a directory)
    weight_sync: str = "collective"
    # collective: auto (nccl when the trainer is on CUDA on Ray, else gloo) | gloo | nccl
    weight_sync_backend: str = "auto"
    weight_sync_timeout_s: float = 600.0  # collective: how long a member waits for the others (join, transfer)
    # vllm: move running requests with their KV cache through vLLM's KV-transfer connector interface
    # (dora.exec.engine.vllm_kv; a store directory under `out`, so the engines must share that
    # filesystem); false: a vLLM migration re-prefills. The hf backend always moves the KV.
    kv_connector: bool = False

    def validate(self) -> None:
        if self.instances < 1:
            raise too_small("instances", self.instances, 1, "rollout instance")
        if self.backend not in ("vllm", "hf"):
            raise InputError(f"backend: {self.backend!r} is not one of 'vllm', 'hf'")
        if self.max_num_seqs < 1:
            raise too_small("max_num_seqs", self.max_num_seqs, 1)
        if self.weight_sync not in ("collective", "tensors", "checkpoint"):
            raise InputError(f"weight_sync: {self.weight_sync!r} is not one of 'collective', 'tensors', 'checkpoint'")
        if self.weight_sync_backend not in ("auto", "gloo", "nccl"):
            raise InputError(f"weight_sync_backend: {self.weight_sync_backend!r} is not one of 'auto', 'gloo', 'nccl'")
        if not self.weight_sync_timeout_s > 0:
            raise too_small("weight_sync_timeout_s", self.weight_sync_timeout_s, 0, "seconds", above=True)
        if not self.temperature > 0:
            raise too_small("temperature", self.temperature, 0, "for RL sampling", above=True)
        if self.device not in ("auto", "cpu", "cuda"):
            raise InputError(f"device: {self.device!r} is not one of 'auto', 'cpu', 'cuda'")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise InputError(f"dtype: {self.dtype!r} is not one of 'float32', 'bfloat16', 'float16'")
        if self.max_model_len < 2:
            raise too_small("max_model_len", self.max_model_len, 2, "tokens (prompt + generation)")
        if self.cpu_threads < 0:
            raise too_small("cpu_threads", self.cpu_threads, 0)
        if self.kv_cache_bytes < 1:
            raise too_small("kv_cache_bytes", self.kv_cache_bytes, 1)
        if self.kv_connector and self.backend != "vllm":
            raise InputError(f"kv_connector: the {self.backend} backend moves KV caches without one; set it to "
                             "false or use backend vllm")


@dataclass
class ExecConfig:
    model: str = ""  # local HF checkpoint directory or hub id
    policies: list[str] = field(default_factory=lambda: ["dora"])
    steps: int = 3  # trainer steps (versions published)
    seed: int = 0
    out: str = "out/exec"  # checkpoints, per-step CSV, weight snapshots
    ray_address: str = ""  # join an existing Ray cluster; empty: start a local one
    runtime: str = "ray"  # ray | local (every actor in this process: machines without Ray)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    policy: PolicyConfig = field(default_factory=_exec_policy)
    checkpoint_every: int = 0  # trainer checkpoint (+ data-consumption state) every N steps; 0: at the end only
    faults: FaultConfig = field(default_factory=FaultConfig)

    def validate(self) -> None:
        if not self.model:
            raise InputError("model: missing; pass --model DIR (build one: python -m dora.exec.tiny_model --out DIR) "
                             "or a hub id")
        check_run(self.policies, self.steps, self.policy)
        if not 0 <= self.seed < 2 ** 63:
            raise InputError(f"seed: must be in [0, 2^63), got {self.seed}")
        if self.runtime not in ("ray", "local"):
            raise InputError(f"runtime: {self.runtime!r} is not one of 'ray', 'local'")
        if self.runtime == "local" and self.trainer.ranks > 1:
            raise InputError(f"trainer.ranks: {self.trainer.ranks} trainer processes need Ray; the local runtime runs "
                             "one: set --set trainer.ranks=1 or drop --local")
        r = self.rollout
        if self.runtime == "local" and r.weight_sync == "collective" and r.weight_sync_backend == "nccl":
            raise InputError("rollout.weight_sync_backend: nccl needs one device per member, and the local runtime "
                             "runs the trainer and every engine in one process; set it to gloo or auto, or drop --local")
        if self.task.max_new_tokens >= self.rollout.max_model_len:
            raise InputError(f"task.max_new_tokens: {self.task.max_new_tokens} leaves no room for the prompt in "
                             f"rollout.max_model_len {self.rollout.max_model_len}; lower it or raise max_model_len")
        if self.policy.group_size < 1:
            raise too_small("policy.group_size", self.policy.group_size, 1, "sample per prompt")
        if self.policy.dora.versions_per_instance > 1:
            raise InputError("policy.dora.versions_per_instance: the vLLM and hf engines serve one version at a "
                             "time; use 1 (several versions per instance exist in the simulator only)")
        if self.policy.dora.elastic_trainer:
            raise InputError("policy.dora.elastic_trainer: not available in the executor yet (simulator only); "
                             "set it to false")
        if (self.policy.laminar.repack_kv and self.rollout.backend == "vllm" and not self.rollout.kv_connector
                and "laminar" in self.policies):
            raise InputError(f"policy.laminar.repack_kv: the {self.rollout.backend} backend cannot move a KV cache "
                             "without rollout.kv_connector (its repack would re-prefill); set "
                             "rollout.kv_connector=true, set it to false, or use --set rollout.backend=hf")
        if self.policy.sync.colocated:
            raise InputError("policy.sync.colocated: the executor runs engines and trainer as separate processes; "
                             "set it to false")
        if self.checkpoint_every < 0:
            raise too_small("checkpoint_every", self.checkpoint_every, 0, "steps (0: at the end only)")
        self.faults.check_run(self.rollout.instances, self.steps, self.checkpoint_every, self.rollout.weight_sync,
                              self.trainer.ranks)


ENGINE_BYTES = 2 ** 30  # an engine's own memory besides the weights (runtime, buffers), at the least


def check_engines_fit(cfg: ExecConfig) -> None:
    """Refuse, before any engine starts, more engines than this machine holds: each loads the
    weights (the checkpoint's weight files, when --model is a local folder) and needs ENGINE_BYTES
    more. Engines of a Ray cluster joined with ray_address are that cluster's to hold."""
    from pathlib import Path

    from dora.exec.model_ref import WEIGHT_FILES
    from dora.limits import check_memory

    if cfg.ray_address:
        return
    p = Path(cfg.model).expanduser()
    weights = sum(f.stat().st_size for pat in WEIGHT_FILES for f in p.glob(pat)) if p.is_dir() else 0
    n = cfg.rollout.instances
    check_memory(f"{n:,} engines of {weights / 2 ** 30:.2f} GiB weights each", n * (weights + ENGINE_BYTES),
                 "lower --instances, or join a Ray cluster with --ray-address")
