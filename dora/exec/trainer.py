"""The RL trainer: an HF causal LM trained with GRPO advantages and the decoupled PPO loss.

  trainer = Trainer(model_path, TrainerConfig())
  stats = trainer.step(batch)          # batch: list[Trajectory] from the engines
  weights = trainer.state_dict_for_publish()

What runs where: one Trainer per process. fp32 on CPU; on CUDA, bf16 autocast over fp32 weights
on one device. With a torch.distributed group of world size N > 1 (trainer.ranks = N: N Ray
actors formed into one gloo (CPU) or NCCL (CUDA) group by dora.exec.trainer_group), every rank
builds a Trainer and FSDP2 shards it (dora.exec.trainer_dist: `fully_shard` per decoder layer
and the root; on CPU fp32, on CUDA bf16 params and fp32 reductions). Every rank gets the whole
batch and computes the GRPO advantages over all of it; of each minibatch (one optimizer step)
a rank trains every N-th trajectory. The loss is a token mean over the whole minibatch (token
counts are summed over the ranks), so the N-rank update is the 1-rank one; gradient clipping
uses the global norm; the step's statistics are summed over the ranks. Full state dicts
(publish, checkpoint) are gathered to rank 0, which alone writes files.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from dora.errors import InputError
from dora.exec import trainer_dist
from dora.exec.config import TrainerConfig
from dora.exec.logprobs import forward_logprobs, token_budget_batches
from dora.exec.losses import add_sums, grpo_advantages, ppo_loss, sequence_token_weights, summarize


@dataclass
class Trajectory:
    """One sampled response, as the engine returns it."""

    prompt_ids: list[int]
    response_ids: list[int]
    behaviour_logprobs: list[float]   # engine logprob of each response token
    version: int                      # policy version that generated every token (C1)
    group_id: int                     # GRPO group (prompt) id
    reward: float
    trajectory_id: int = -1
    finish_reason: str = "stop"


def _validate_batch(batch: list[Trajectory]) -> None:
    if not batch:
        raise ValueError("training batch is empty")
    for i, t in enumerate(batch):
        if not t.prompt_ids or not t.response_ids:
            raise ValueError(f"trajectory {i} (id {t.trajectory_id}): empty prompt or response")
        if len(t.behaviour_logprobs) != len(t.response_ids):
            raise ValueError(f"trajectory {i} (id {t.trajectory_id}): {len(t.behaviour_logprobs)} behaviour "
                             f"logprobs for {len(t.response_ids)} response tokens")
        if not math.isfinite(t.reward):
            raise ValueError(f"trajectory {i} (id {t.trajectory_id}): reward {t.reward} is not finite")


def zero_variance_fraction(batch: list[Trajectory]) -> float:
    """Fraction of GRPO groups (of >= 2 samples) whose rewards are all equal: their advantages are 0."""
    groups: dict[int, list[float]] = {}
    for t in batch:
        groups.setdefault(t.group_id, []).append(t.reward)
    sized = [r for r in groups.values() if len(r) > 1]
    return sum(max(r) - min(r) < 1e-12 for r in sized) / len(sized) if sized else 0.0


@dataclass
class StalenessRecord:
    """Staleness of the trajectories consumed by one trainer step (trainer version - generating version)."""

    trainer_version: int
    count: int
    mean: float
    max: int
    histogram: dict[int, int] = field(default_factory=dict)


class Trainer:
    """Holds the policy, its optimizer and its version; `step` trains on one batch."""

    def __init__(self, model_path: str | Path, cfg: TrainerConfig | None = None, *, version: int = 0):
        from transformers import AutoModelForCausalLM

        self.cfg = cfg or TrainerConfig()
        self.model_path = str(model_path)
        self.rank, self.world = trainer_dist.world()
        if self.cfg.device == "auto":
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.device = torch.device(self.cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise InputError("trainer device 'cuda': no CUDA device is available; use device=cpu")
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.cfg.threads > 0:
            torch.set_num_threads(self.cfg.threads)
        torch.manual_seed(self.cfg.seed)
        try:
            model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        except OSError as e:
            raise InputError(f"model {self.model_path}: cannot load ({e}); pass a local checkpoint directory "
                             "or a hub id") from None
        self.tied = bool(getattr(model.config, "tie_word_embeddings", False))
        if self.cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.to(self.device)
        self.fsdp = self.world > 1  # FSDP2 over the group (CPU: gloo, CUDA: NCCL)
        if self.fsdp:
            trainer_dist.shard(model, self.device, bf16=self.cfg.bf16 and self.device.type == "cuda")
        self.model = model
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, betas=tuple(self.cfg.betas),
                                           weight_decay=self.cfg.weight_decay)
        self.version = version
        self.steps = 0
        self.staleness: list[StalenessRecord] = []

    # --- device / precision -------------------------------------------------------------

    def _autocast(self):
        if self.device.type == "cuda" and self.cfg.bf16 and not self.fsdp:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # --- training -----------------------------------------------------------------------

    def _micro_batches(self, items: list[Trajectory]) -> list[list[int]]:
        lengths = [len(t.prompt_ids) + len(t.response_ids) for t in items]
        return token_budget_batches(lengths, self.cfg.micro_batch_tokens)

    def _sync_count(self, n: int, op) -> int:
        return int(trainer_dist.sum_over_ranks(n, self.device, op)) if self.fsdp else n

    def _forward(self, seqs: list[Trajectory]) -> list[torch.Tensor]:
        with self._autocast():
            return forward_logprobs(self.model, [t.prompt_ids + t.response_ids for t in seqs],
                                    [len(t.prompt_ids) for t in seqs], temperature=self.cfg.temperature)

    @torch.no_grad()
    def proximal_logprobs(self, batch: list[Trajectory], filler: Trajectory | None = None) -> list[torch.Tensor]:
        """Log-probs of each response under the current weights (pi_prox), fp32 on the device.
        FSDP: every rank runs as many forwards, on `filler` (default batch[0]) when it has run out."""
        self.model.eval()
        out: list[torch.Tensor | None] = [None] * len(batch)
        mbs = self._micro_batches(batch)
        n_mb = self._sync_count(len(mbs), torch.distributed.ReduceOp.MAX if self.fsdp else None)
        for k in range(n_mb):
            if k >= len(mbs):
                self._forward([filler or batch[0]])
                continue
            for i, lp in zip(mbs[k], self._forward([batch[i] for i in mbs[k]])):
                out[i] = lp.float()
        self.model.train()
        return out  # type: ignore[return-value]

    def _prepare(self, batch: list[Trajectory]):
        """Advantages (whole batch); the minibatches (one optimizer step each: the same split on every
        rank), of each this rank's share (every world-th trajectory) as indices into `mine`, this
        rank's trajectories; their advantages, proximal and behaviour logprobs."""
        lc = self.cfg.loss
        rewards = torch.tensor([t.reward for t in batch], dtype=torch.float32)
        groups = torch.tensor([t.group_id for t in batch], dtype=torch.long)
        adv = grpo_advantages(rewards, groups, eps=lc.adv_eps, scale_by_std=lc.scale_adv_by_std)
        order = list(range(len(batch)))
        random.Random(self.cfg.seed + self.steps).shuffle(order)
        m = self.cfg.minibatches
        shares = [sorted(order[k::m])[self.rank :: self.world] for k in range(m)]
        local = sorted(i for share in shares for i in share)  # this rank's trajectories
        at = {i: j for j, i in enumerate(local)}
        mine = [batch[i] for i in local]
        prox = self.proximal_logprobs(mine, filler=batch[0])
        behav = [torch.tensor(t.behaviour_logprobs, dtype=torch.float32, device=self.device) for t in mine]
        return rewards, adv, [[at[i] for i in share] for share in shares], mine, adv[local], prox, behav

    def _backward(self, mine: list[Trajectory], items: list[int], adv: torch.Tensor,
                  prox: list[torch.Tensor], behav: list[torch.Tensor],
                  filler: Trajectory) -> tuple[dict[str, float], int]:
        """Accumulate gradients of the loss over trajectories `items` (indices into mine), packed into
        micro-batches of <= micro_batch_tokens; the loss is a token mean over all of them (and over
        every rank's items). FSDP: a rank that has run out runs zero-loss passes on `filler`."""
        lc = self.cfg.loss
        op = torch.distributed.ReduceOp
        seq_mean = lc.aggregation == "seq_mean_token_mean"
        count = len(items) if seq_mean else sum(len(mine[i].response_ids) for i in items)
        tokens = self._sync_count(count, op.SUM if self.fsdp else None)  # the loss's denominator
        micro = [[items[j] for j in m] for m in self._micro_batches([mine[i] for i in items])]
        n_micro = self._sync_count(len(micro), op.MAX if self.fsdp else None)
        sums: dict[str, float] = {}
        for k in range(n_micro):
            if k >= len(micro):  # FSDP: every rank runs as many forward/backward passes
                (torch.cat(self._forward([filler])).sum() * 0.0).backward()
                continue
            mb = micro[k]
            logp = self._forward([mine[i] for i in mb])
            logp_flat = torch.cat(logp).float()
            adv_flat = torch.cat([adv[i].expand(len(mine[i].response_ids)) for i in mb]).to(self.device)
            loss, s = ppo_loss(logp_flat, torch.cat([prox[i] for i in mb]), torch.cat([behav[i] for i in mb]),
                               adv_flat, torch.ones_like(logp_flat), clip_low=lc.clip_low, clip_high=lc.clip_high,
                               correction=lc.correction, is_cap=lc.is_cap, denom=tokens,
                               token_weight=sequence_token_weights([len(mine[i].response_ids) for i in mb],
                                                                   self.device) if seq_mean else None)
            if self.fsdp:
                loss = loss * self.world  # FSDP averages gradients over ranks; the loss is a global token mean
            add_sums(sums, s)
            loss.backward()
        return sums, n_micro

    def accumulate_gradients(self, batch: list[Trajectory]) -> dict[str, float]:
        """Zero the gradients, then accumulate those of the whole batch as one minibatch (no optimizer
        step, version unchanged). For tests and inspection; `step` does the same per minibatch."""
        _validate_batch(batch)
        _, _, _, mine, adv, prox, behav = self._prepare(batch)
        self.optimizer.zero_grad(set_to_none=True)
        sums, _ = self._backward(mine, list(range(len(mine))), adv, prox, behav, batch[0])
        return summarize(trainer_dist.add_over_ranks(sums) if self.fsdp else sums)

    def step(self, batch: list[Trajectory]) -> dict[str, float]:
        """One training step on a batch of trajectories: returns statistics; version += 1.

        Staleness of each trajectory = trainer version now - generating version (recorded)."""
        _validate_batch(batch)
        t0 = time.perf_counter()
        record = self._record_staleness(batch)
        rewards, adv_all, minibatches, mine, adv, prox, behav = self._prepare(batch)
        sums: dict[str, float] = {}
        grad_norms = []
        skipped = 0
        micro_count = 0
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        for _epoch in range(self.cfg.ppo_epochs):
            for items in minibatches:
                self.optimizer.zero_grad(set_to_none=True)
                s, n = self._backward(mine, items, adv, prox, behav, batch[0])
                add_sums(sums, s)
                micro_count += n
                norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
                grad_norms.append(norm)
                if math.isfinite(norm):
                    self.optimizer.step()
                else:  # an inf/NaN gradient would make every weight NaN: this minibatch's update is skipped
                    skipped += 1  # (every rank sees the same global norm, so all skip together)
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1
        self.steps += 1
        if self.cfg.snapshot_every and self.version % self.cfg.snapshot_every == 0:
            self.save_weights(Path(self.cfg.snapshot_dir) / f"v{self.version}")
        stats = summarize(trainer_dist.add_over_ranks(sums) if self.fsdp else sums)
        n_resp = sum(len(t.response_ids) for t in batch)
        stats.update(
            version=float(self.version), trajectories=float(len(batch)),
            reward_mean=float(rewards.mean()), reward_std=float(rewards.std()) if len(batch) > 1 else 0.0,
            adv_abs_mean=float(adv_all.abs().mean()), zero_var_groups=zero_variance_fraction(batch),
            grad_norm=max(grad_norms), skipped_updates=float(skipped), micro_batches=float(micro_count),
            response_tokens=float(n_resp), response_len_mean=n_resp / len(batch),
            staleness_mean=record.mean, staleness_max=float(record.max), lr=lr,
            step_time_s=time.perf_counter() - t0)
        return stats

    def current_lr(self) -> float:
        """Learning rate of the next step: linear warm-up over warmup_steps, then constant."""
        if self.cfg.warmup_steps <= 0:
            return self.cfg.lr
        return self.cfg.lr * min(1.0, (self.steps + 1) / self.cfg.warmup_steps)

    def _record_staleness(self, batch: list[Trajectory]) -> StalenessRecord:
        hist: dict[int, int] = {}
        for t in batch:
            s = self.version - t.version
            if s < 0:
                raise ValueError(f"trajectory {t.trajectory_id}: generated by version {t.version}, newer than the "
                                 f"trainer's {self.version}")
            hist[s] = hist.get(s, 0) + 1
        n = len(batch)
        rec = StalenessRecord(self.version, n, sum(k * v for k, v in hist.items()) / n, max(hist),
                              dict(sorted(hist.items())))
        self.staleness.append(rec)
        return rec

    def staleness_metrics(self) -> dict[str, float]:
        """staleness_mean / staleness_max over all trajectories trained so far."""
        n = sum(r.count for r in self.staleness)
        if not n:
            return {"staleness_mean": 0.0, "staleness_max": 0.0}
        return {"staleness_mean": sum(r.mean * r.count for r in self.staleness) / n,
                "staleness_max": float(max(r.max for r in self.staleness))}

    # --- weights out --------------------------------------------------------------------

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        return trainer_dist.full_model_state(self.model) if self.fsdp else self.model.state_dict()

    def state_dict_for_publish(self, device: str | torch.device = "cpu",
                               dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """HF-named tensors of the current weights (a tied lm_head is left out, as in the checkpoint).

        Under FSDP every rank must call this (it gathers to rank 0); the other ranks get {}.
        """
        out = {}
        for name, t in self._full_state_dict().items():
            if self.tied and name == "lm_head.weight":
                continue
            t = t.detach()
            out[name] = t.to(device=device, dtype=dtype or t.dtype).contiguous().clone()
        return out

    def save_weights(self, out_dir: str | Path) -> Path:
        """Write config + safetensors (+ tokenizer files of the source model) loadable by vLLM and
        transformers. Written to a temporary directory and renamed, so readers never see half a version."""
        out = Path(out_dir)
        state = self.state_dict_for_publish()
        if self.rank != 0:
            return out
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        model = self.model
        model.save_pretrained(str(tmp), state_dict=state, safe_serialization=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                     "merges.txt", "generation_config.json", "chat_template.jinja"):
            src = Path(self.model_path) / name
            if src.is_file() and not (tmp / name).exists():
                shutil.copy2(src, tmp / name)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        return out

    def save_checkpoint(self, out_dir: str | Path, data_state: dict | None = None) -> Path:
        """Model weights (as save_weights) + optimizer state + version/steps/staleness, for resume;
        `data_state` (the driver's data-consumption state at this version) goes in the same
        directory. Written to a temporary directory and renamed over the previous checkpoint,
        which stays readable until then (`latest_checkpoint` finds whichever is complete)."""
        out = Path(out_dir)
        tmp = out.with_name(f".{out.name}.ckpt-tmp-{os.getpid()}")
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self.save_weights(tmp / "model")
        optim = self._optimizer_state()
        if self.rank != 0:
            return out
        torch.save(optim, tmp / "optimizer.pt")
        if data_state is not None:
            if data_state.get("version", self.version) != self.version:
                raise ValueError(f"save_checkpoint: data state of version {data_state.get('version')} for trainer "
                                 f"version {self.version}")
            (tmp / "data_state.json").write_text(json.dumps(data_state, indent=1) + "\n")
        state = {"version": self.version, "steps": self.steps, "model_path": self.model_path, "world": self.world,
                 "staleness": [asdict(r) for r in self.staleness], "config": asdict(self.cfg)}
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1) + "\n")  # last: marks it complete
        old = _previous_dir(out)
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return out

    def _optimizer_state(self) -> dict:
        if self.fsdp:
            return trainer_dist.full_optimizer_state(self.model, self.optimizer)
        return self.optimizer.state_dict()

    def load_checkpoint(self, ckpt_dir: str | Path) -> None:
        """Restore weights, optimizer state, version, steps and staleness records from save_checkpoint."""
        from safetensors.torch import load_file

        d = Path(ckpt_dir)
        files = sorted((d / "model").glob("*.safetensors"))
        if not files or not (d / "trainer_state.json").is_file() or not (d / "optimizer.pt").is_file():
            raise InputError(f"checkpoint {d}: missing model/*.safetensors, optimizer.pt or trainer_state.json; "
                             "pass a directory written by Trainer.save_checkpoint")
        weights: dict[str, torch.Tensor] = {}
        for f in files:
            weights.update(load_file(str(f)))
        if self.tied and "lm_head.weight" not in weights:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        state = json.loads((d / "trainer_state.json").read_text())
        ranks = int(state.get("world", 1))
        if (ranks > 1) != self.fsdp:  # the optimizer state of one rank and of several (FSDP) differ
            raise InputError(f"checkpoint {d}: written by {ranks} trainer rank(s), resumed by {self.world}; set "
                             + ("trainer.ranks=1" if ranks == 1 else "trainer.ranks to 2 or more"))
        optim = torch.load(d / "optimizer.pt", map_location="cpu", weights_only=False)
        if self.fsdp:
            trainer_dist.load_full_state(self.model, self.optimizer, weights, optim)
        else:
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
            if unexpected or [k for k in missing if not (self.tied and k == "lm_head.weight")]:
                raise InputError(f"checkpoint {d}: weights do not fit the model (missing {missing[:3]}, "
                                 f"unexpected {unexpected[:3]}); use the model it was written for")
            self.optimizer.load_state_dict(optim)
        self.version, self.steps = int(state["version"]), int(state["steps"])
        self.staleness = [StalenessRecord(r["trainer_version"], r["count"], r["mean"], r["max"],
                                          {int(k): v for k, v in r["histogram"].items()})
                          for r in state["staleness"]]


def _previous_dir(out: Path) -> Path:
    return out.with_name(f".{out.name}.previous")


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The complete checkpoint written by save_checkpoint(out_dir): the directory itself, or the
    previous one when a save was cut between its two renames; None if there is none."""
    out = Path(out_dir)
    for d in (out, _previous_dir(out)):
        if (d / "trainer_state.json").is_file():
            return d
    return None


def read_data_state(ckpt_dir: str | Path) -> dict:
    """The data-consumption state saved with a checkpoint ({} when it was saved without one)."""
    p = Path(ckpt_dir) / "data_state.json"
    return json.loads(p.read_text()) if p.is_file() else {}
