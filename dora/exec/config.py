"""Typed configs of the executor's trainer and task (built with dora.config.build; YAML/--set)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dora.errors import InputError, too_small


@dataclass
class LossConfig:
    clip_low: float = 0.2            # PPO epsilon below 1
    clip_high: float = 0.28          # PPO epsilon above 1 (clip-higher, DAPO)
    correction: Literal["tis", "mask", "off"] = "tis"   # see dora.exec.losses
    is_cap: float = 2.0              # C: truncation cap of pi_prox / pi_behav
    adv_eps: float = 1e-6            # std epsilon of the GRPO advantages
    scale_adv_by_std: bool = True    # False: advantages are reward - group mean
    aggregation: Literal["token_mean", "seq_mean_token_mean"] = "token_mean"  # see dora.exec.losses

    def validate(self) -> None:
        if not (0 <= self.clip_low < 1):
            raise InputError(f"clip_low: must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0:
            raise too_small("clip_high", self.clip_high, 0)
        if self.is_cap <= 0:
            raise too_small("is_cap", self.is_cap, 0, above=True)
        if self.adv_eps <= 0:
            raise too_small("adv_eps", self.adv_eps, 0, above=True)
        if self.aggregation not in ("token_mean", "seq_mean_token_mean"):
            raise InputError(f"aggregation: {self.aggregation!r} is not one of 'token_mean', 'seq_mean_token_mean'")


@dataclass
class TrainerConfig:
    lr: float = 1e-4                 # AdamW learning rate (tiny model; 1e-3 collapsed it; ~1e-6 for 7B)
    warmup_steps: int = 10           # linear lr warm-up (Adam's first steps are large otherwise)
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0           # max global grad norm (0: off)
    micro_batch_tokens: int = 8192   # token budget per forward/backward (dynamic micro-batching)
    minibatches: int = 1             # optimizer steps per training batch
    ppo_epochs: int = 1              # passes over the batch
    loss: LossConfig = field(default_factory=LossConfig)
    device: str = "auto"             # auto | cpu | cuda
    bf16: bool = True                # bf16 autocast on CUDA (CPU is always fp32)
    gradient_checkpointing: bool = False  # recompute activations (large models on GPU)
    seed: int = 0
    temperature: float = 1.0         # log-probs of log_softmax(logits / T): T = the rollout temperature makes the
                                     # gradient that of the sampling policy (behaviour logprobs must be at T too)
    threads: int = 0                 # torch CPU threads (0: torch's default); 1 when engines share the cores
    snapshot_every: int = 0          # save the weights of every k-th version to snapshot_dir/v{k} (0: never)
    snapshot_dir: str = ""           # for evaluation after the run (benchmarks/exec_speedup.py)
    ranks: int = 1                   # trainer processes (Ray actors) in one torch.distributed group, FSDP2-sharded

    def validate(self) -> None:
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise InputError(f"betas: expected two numbers in [0, 1) (Adam beta1, beta2), got {list(self.betas)}")
        if self.threads < 0:
            raise too_small("threads", self.threads, 0)
        if self.ranks < 1:
            raise too_small("ranks", self.ranks, 1, "trainer process", fix="set it to 1 (one trainer) or more")
        if self.lr <= 0:
            raise too_small("lr", self.lr, 0, above=True)
        if not self.temperature > 0:
            raise too_small("temperature", self.temperature, 0, above=True)
        if self.warmup_steps < 0:
            raise too_small("warmup_steps", self.warmup_steps, 0)
        if self.weight_decay < 0:
            raise too_small("weight_decay", self.weight_decay, 0)
        if self.grad_clip < 0:
            raise too_small("grad_clip", self.grad_clip, 0)
        if self.micro_batch_tokens < 1:
            raise too_small("micro_batch_tokens", self.micro_batch_tokens, 1)
        if self.minibatches < 1 or self.ppo_epochs < 1:
            raise InputError(f"minibatches and ppo_epochs: must be >= 1, got {self.minibatches}, "
                             f"{self.ppo_epochs}; set both to 1 or more")
        if self.device not in ("auto", "cpu", "cuda"):
            raise InputError(f"device: {self.device!r} is not one of 'auto', 'cpu', 'cuda'")
        if self.snapshot_every < 0:
            raise too_small("snapshot_every", self.snapshot_every, 0)
        if self.snapshot_every and not self.snapshot_dir:
            raise InputError("snapshot_every > 0 needs snapshot_dir; set snapshot_dir to a directory for the weight "
                             "snapshots, or snapshot_every to 0")


@dataclass
class TaskConfig:
    dataset: str = "count"           # "count" (built-in synthetic) or a .parquet/.jsonl path
    reward: str = "auto"             # a name in dora.exec.rewards.REWARDS; auto: count for count, else math
    num_prompts: int = 4096          # prompts generated for the synthetic task
    seed: int = 0
    median_span: float = 8.0         # count task: median of the numbers to list
    sigma: float = 1.0               # count task: log-normal sigma of the span
    max_span: int = 100              # count task: longest span
    max_low: int = 0                 # count task: low end uniform in [0, max_low]
    descending: bool = True          # count task: count down from the high end (else up)
    max_new_tokens: int = 512        # generation cap

    def validate(self) -> None:
        if self.num_prompts < 1:
            raise too_small("num_prompts", self.num_prompts, 1)
        if self.max_new_tokens < 1:
            raise too_small("max_new_tokens", self.max_new_tokens, 1)
        if self.median_span < 1 or self.max_span < 1 or self.sigma < 0 or self.max_low < 0:
            raise InputError(f"median_span, max_span: must be >= 1; sigma, max_low: must be >= 0; got "
                             f"{self.median_span}, {self.max_span}, {self.sigma}, {self.max_low}; set them within "
                             "those bounds")
        from dora.exec.rewards import REWARDS

        if self.reward != "auto" and self.reward not in REWARDS:
            raise InputError(f"reward: {self.reward!r} unknown; choose auto or one of {', '.join(sorted(REWARDS))}")

    def reward_name(self) -> str:
        if self.reward != "auto":
            return self.reward
        return "count" if self.dataset == "count" else "math"
