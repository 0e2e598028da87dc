"""Supervised warm-start on the count task (dora.exec.tiny_model): a randomly initialised model
learns the answer format before RL."""

from __future__ import annotations

import math
import random
import sys
import time

import torch

from dora.errors import InputError
from dora.exec.logprobs import forward_logprobs, token_budget_batches


def sft_warm_start(model, *, steps: int, seed: int = 0, batch_size: int = 64, lr: float = 3e-3,
                   micro_batch_tokens: int = 4096, tokenizer=None, progress: bool = False,
                   log_every: int = 50, reverse_frac: float = 0.0) -> list[float]:
    """Supervised pass on count-task prompts (cross-entropy on the answer tokens + <eos>).

    Prompts come from dora.exec.tasks.count_task with seed + 1_000_003, a stream disjoint from the
    default RL prompts' seed. With reverse_frac > 0, that fraction of the targets (drawn at random)
    list the numbers in the other order: the model then picks the prompt's direction only about
    1 - reverse_frac of the time, a choice RL with the count reward can learn. Returns the loss of
    each step.
    """
    from dora.exec.tasks import count_task, sft_pairs
    from dora.exec.tokenizer import build_tokenizer

    tok = tokenizer or build_tokenizer()
    torch.manual_seed(seed)
    if not 0.0 <= reverse_frac < 1.0:
        raise InputError(f"warm-start reverse fraction: must be in [0, 1), got {reverse_frac}")
    examples = count_task(steps * batch_size, seed=seed + 1_000_003)
    flips = random.Random(seed + 7).random
    pairs = sft_pairs(tok, examples, reverse=[flips() < reverse_frac for _ in examples] if reverse_frac else None)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    losses = []
    t0 = time.perf_counter()
    for s in range(steps):
        chunk = pairs[s * batch_size : (s + 1) * batch_size]
        n_tokens = sum(len(t) for _, t in chunk)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for mb in token_budget_batches([len(p) + len(t) for p, t in chunk], micro_batch_tokens):
            logp = forward_logprobs(model, [chunk[i][0] + chunk[i][1] for i in mb], [len(chunk[i][0]) for i in mb])
            loss = -torch.cat(logp).sum() / n_tokens
            loss.backward()
            loss_sum += loss.detach().item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss_sum)
        if progress and (s + 1) % log_every == 0:
            print(f"warm-start step {s + 1}/{steps} loss {sum(losses[-log_every:]) / log_every:.4f} "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    model.eval()
    return losses
