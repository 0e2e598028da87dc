"""RL losses, CleanRL style: small functions on per-token tensors of any (matching) shape.

Notation per response token:  logp = log pi_theta (being trained), prox = log pi_prox (the
trainer's policy before this update, recomputed), behav = log pi_behav (the engine's logprobs
of the version that generated the token).

Decoupled PPO (AReaL, arXiv 2505.24298): the clipped surrogate uses r = pi_theta / pi_prox, and
the importance weight w = pi_prox / pi_behav corrects for staleness (behav is an older version)
and for the engine/trainer numerical mismatch. With prox recomputed by the trainer, w is exactly
the truncated-importance-sampling weight of Yao et al. / verl's TIS, so one factor does both.

correction:
  "tis"  w = min(pi_prox / pi_behav, C)                       (truncate; Yao et al., verl TIS)
  "mask" w = pi_prox / pi_behav, tokens with w > C dropped    (AReaL's behav_imp_weight_cap)
  "off"  plain PPO against the behaviour policy: r = pi_theta / pi_behav, no weight
"""

from __future__ import annotations

from typing import Literal

import torch

Correction = Literal["tis", "mask", "off"]
CORRECTIONS = ("tis", "mask", "off")


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, eps: float = 1e-6,
                    scale_by_std: bool = True) -> torch.Tensor:
    """GRPO: (reward - group mean) / (group std + eps), std unbiased (as verl). A group of one
    sample gets advantage 0. With scale_by_std=False only the mean is subtracted (Dr. GRPO)."""
    rewards = rewards.float()
    adv = torch.zeros_like(rewards)
    for g in torch.unique(group_ids):
        idx = group_ids == g
        r = rewards[idx]
        if r.numel() < 2:
            continue
        centred = r - r.mean()
        adv[idx] = centred / (r.std() + eps) if scale_by_std else centred
    return adv


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


def token_mean(x: torch.Tensor, mask: torch.Tensor, denom: float | None = None) -> torch.Tensor:
    """Token-level aggregation: sum over unmasked tokens / denom (default: their count).

    Pass denom = tokens in the whole batch when summing micro-batch losses, so the gradient
    equals that of one big batch."""
    n = mask.sum() if denom is None else denom
    return masked_sum(x, mask) / max(float(n), 1.0)


def sequence_token_weights(lengths: list[int], device=None) -> torch.Tensor:
    """Per-token weights 1 / (length of its response), responses concatenated. Summed over tokens
    and divided by the number of responses this gives the sequence-mean-token-mean aggregation:
    every response counts once whatever its length (original GRPO), so the many tokens of long
    wrong answers do not outweigh short right ones."""
    return torch.cat([torch.full((n,), 1.0 / n, device=device) for n in lengths])


def truncated_is_weight(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """TIS: min(pi_trainer / pi_engine, cap), no gradient."""
    return torch.exp(trainer_logp - engine_logp).detach().clamp(max=cap)


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float) -> torch.Tensor:
    """PPO per-token loss: -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)."""
    return -torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv)


def clipped_mask(ratio: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float) -> torch.Tensor:
    """Tokens where the clipped branch is active (its gradient is zero)."""
    return ((ratio > 1.0 + clip_high) & (adv > 0)) | ((ratio < 1.0 - clip_low) & (adv < 0))


def kl_k3(logp_q: torch.Tensor, logp_p: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(p || q) from samples of p: q/p - 1 - log(q/p) (>= 0)."""
    d = logp_q - logp_p
    return torch.exp(d) - 1.0 - d


def ppo_loss(logp: torch.Tensor, prox: torch.Tensor, behav: torch.Tensor, adv: torch.Tensor,
             mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2,
             correction: Correction = "tis", is_cap: float = 2.0,
             denom: float | None = None,
             token_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Decoupled PPO loss (token mean over `denom` tokens) and summable statistics.

    token_weight (optional, per token) scales each token's term before the sum: with 1 / (its
    response's length) and denom = number of responses it is GRPO's sequence mean of token means
    (see `sequence_token_weights`). Returns (loss, sums): sums are plain floats that add across
    micro-batches; turn them into rates with `summarize`.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction {correction!r} is not one of {CORRECTIONS}")
    valid = mask.float()
    prox, behav, adv = prox.detach(), behav.detach(), adv.detach()
    raw_w = torch.exp(prox - behav)
    train_mask = valid
    if correction == "off":
        ratio = torch.exp(logp - behav)
        weight = torch.ones_like(raw_w)
    else:
        ratio = torch.exp(logp - prox)
        if correction == "tis":
            weight = truncated_is_weight(prox, behav, is_cap)
        else:
            train_mask = valid * (raw_w <= is_cap).float()
            weight = raw_w
    per_token = clipped_surrogate(ratio, adv, clip_low, clip_high) * weight
    scaled = per_token if token_weight is None else per_token * token_weight.detach()
    loss = token_mean(scaled, train_mask, denom)
    with torch.no_grad():
        v, t = valid.bool(), train_mask.bool()
        w_on = raw_w[v] if correction == "off" else weight[t]
        sums = {
            "tokens": float(v.sum()),
            "clipped_tokens": float(clipped_mask(ratio, adv, clip_low, clip_high)[t].sum()),
            "ratio_sum": float(ratio[v].sum()),
            "is_weight_sum": float(w_on.sum()),
            "is_weight_sq_sum": float((w_on**2).sum()),
            "is_weight_count": float(w_on.numel()),
            "is_truncated_tokens": float(((raw_w > is_cap) & v).sum()),
            "kl_prox_behav_sum": float(kl_k3(prox, behav)[v].sum()),
            "kl_theta_prox_sum": float(kl_k3(logp.detach(), prox)[v].sum()),
            "loss_sum": float(masked_sum(per_token.detach(), train_mask)),
        }
    return loss, sums


def summarize(sums: dict[str, float]) -> dict[str, float]:
    """Rates from summed statistics: clip fraction, mean ratio, ESS of the IS weights (1 = uniform),
    truncated fraction, KL estimates (k3) of behaviour -> proximal and proximal -> current."""
    n = max(sums.get("tokens", 0.0), 1.0)
    w, w2 = sums.get("is_weight_sum", 0.0), sums.get("is_weight_sq_sum", 0.0)
    nw = max(sums.get("is_weight_count", 0.0), 1.0)
    return {
        "tokens": sums.get("tokens", 0.0),
        "clip_frac": sums.get("clipped_tokens", 0.0) / n,
        "ratio_mean": sums.get("ratio_sum", 0.0) / n,
        "is_weight_mean": w / nw,
        "is_ess": (w * w) / (nw * w2) if w2 > 0 else 1.0,
        "is_truncated_frac": sums.get("is_truncated_tokens", 0.0) / n,
        "kl_prox_behav": sums.get("kl_prox_behav_sum", 0.0) / n,
        "kl_theta_prox": sums.get("kl_theta_prox_sum", 0.0) / n,
        "pg_loss": sums.get("loss_sum", 0.0) / n,
    }


def add_sums(acc: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    for k, v in new.items():
        acc[k] = acc.get(k, 0.0) + v
    return acc
