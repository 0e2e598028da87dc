"""Losses on small examples computed by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dora.exec.losses import (add_sums, clipped_mask, grpo_advantages, kl_k3, ppo_loss, summarize,  # noqa: E402
                              token_mean, truncated_is_weight)

LN = math.log


def test_grpo_advantages_two_groups():
    # group 0: rewards 1, 0 -> mean 0.5, unbiased std 0.70711 -> +-0.70711
    # group 1: rewards 2, 4, 6 -> mean 4, unbiased std 2 -> -1, 0, 1
    rewards = torch.tensor([1.0, 2.0, 0.0, 4.0, 6.0])
    groups = torch.tensor([0, 1, 0, 1, 1])
    adv = grpo_advantages(rewards, groups, eps=0.0)
    s = 0.5 / math.sqrt(0.5)
    assert adv.tolist() == pytest.approx([s, -1.0, -s, 0.0, 1.0], abs=1e-6)


def test_grpo_advantages_without_std_and_degenerate_groups():
    rewards = torch.tensor([1.0, 2.0, 0.0, 4.0, 6.0, 3.0, 3.0, 9.0])
    groups = torch.tensor([0, 1, 0, 1, 1, 2, 2, 7])
    adv = grpo_advantages(rewards, groups, scale_by_std=False)
    # group 2: equal rewards -> 0; group 7: a single sample -> 0
    assert adv.tolist() == pytest.approx([0.5, -2.0, -0.5, 0.0, 2.0, 0.0, 0.0, 0.0])
    adv_std = grpo_advantages(rewards, groups, eps=1e-6)
    assert adv_std[5:].tolist() == [0.0, 0.0, 0.0]  # std 0 + eps: no blow-up


def test_plain_ppo_three_tokens():
    # correction off: r = pi_theta / pi_behav; eps 0.2.
    # t1 r=1.5 A=+1 -> min(1.5, 1.2) = 1.2 (clipped); t2 r=0.5 A=+1 -> 0.5;
    # t3 r=0.5 A=-2 -> min(-1.0, -1.6) = -1.6 (clipped). loss = mean(-1.2, -0.5, 1.6) = -0.1/3
    behav = torch.tensor([0.0, 0.0, 0.0])
    logp = torch.tensor([LN(1.5), LN(0.5), LN(0.5)], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -2.0])
    loss, sums = ppo_loss(logp, torch.zeros(3), behav, adv, torch.ones(3), clip_low=0.2, clip_high=0.2,
                          correction="off")
    assert loss.item() == pytest.approx(-0.1 / 3, abs=1e-6)
    loss.backward()
    # only t2 is unclipped: d(-r A)/dlogp = -r A = -0.5, over 3 tokens
    assert logp.grad.tolist() == pytest.approx([0.0, -0.5 / 3, 0.0], abs=1e-6)
    st = summarize(sums)
    assert st["clip_frac"] == pytest.approx(2 / 3)
    assert st["ratio_mean"] == pytest.approx((1.5 + 0.5 + 0.5) / 3)


def test_decoupled_ppo_with_truncated_is():
    # w = pi_prox/pi_behav = 3, 0.5, 1 -> truncated at C=2: 2, 0.5, 1
    # r = pi_theta/pi_prox = 1.1, 0.9, 1.3; A = 1, -1, 2; eps 0.2
    # t1: min(1.1, 1.1) * 2 = 2.2 -> -2.2; t2: min(-0.9, -0.9) * 0.5 -> +0.45; t3: min(2.6, 2.4) -> -2.4
    behav = torch.zeros(3)
    prox = torch.tensor([LN(3.0), LN(0.5), 0.0])
    logp = (prox + torch.tensor([LN(1.1), LN(0.9), LN(1.3)])).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, sums = ppo_loss(logp, prox, behav, adv, torch.ones(3), clip_low=0.2, clip_high=0.2,
                          correction="tis", is_cap=2.0)
    assert loss.item() == pytest.approx((-2.2 + 0.45 - 2.4) / 3, abs=1e-6)
    loss.backward()
    # d/dlogp of -w r A for unclipped tokens: t1 -2*1.1*1, t2 -0.5*0.9*(-1); t3 clipped
    assert logp.grad.tolist() == pytest.approx([-2.2 / 3, 0.45 / 3, 0.0], abs=1e-6)
    st = summarize(sums)
    assert st["is_truncated_frac"] == pytest.approx(1 / 3)
    assert st["is_weight_mean"] == pytest.approx(3.5 / 3)
    assert st["is_ess"] == pytest.approx(3.5**2 / (3 * 5.25))
    assert st["clip_frac"] == pytest.approx(1 / 3)


def test_mask_mode_drops_tokens_over_the_cap():
    behav = torch.zeros(3)
    prox = torch.tensor([LN(3.0), LN(0.5), 0.0])
    logp = prox + torch.tensor([LN(1.1), LN(0.9), LN(1.3)])
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, _ = ppo_loss(logp, prox, behav, adv, torch.ones(3), clip_low=0.2, clip_high=0.2,
                       correction="mask", is_cap=2.0)
    # t1 (w = 3 > 2) is dropped; t2: 0.45, t3: -2.4, mean over the 2 kept tokens
    assert loss.item() == pytest.approx((0.45 - 2.4) / 2, abs=1e-6)


def test_correction_off_ignores_proximal_and_differs_from_tis():
    behav = torch.zeros(3)
    prox = torch.tensor([LN(3.0), LN(0.5), 0.0])
    logp = prox.clone()
    adv = torch.tensor([1.0, -1.0, 2.0])
    off, _ = ppo_loss(logp, prox, behav, adv, torch.ones(3), correction="off", clip_low=0.2, clip_high=0.2)
    # r vs behaviour = 3, 0.5, 1: t1 min(3, 1.2) = 1.2; t2 min(-0.5, -0.8) = -0.8; t3 2 -> -1.2+0.8-2
    assert off.item() == pytest.approx((-1.2 + 0.8 - 2.0) / 3, abs=1e-6)
    tis, _ = ppo_loss(logp, prox, behav, adv, torch.ones(3), correction="tis", is_cap=2.0)
    # r = 1: -w A = -2, 0.5*1, -2 -> mean
    assert tis.item() == pytest.approx((-2.0 + 0.5 - 2.0) / 3, abs=1e-6)
    with pytest.raises(ValueError):
        ppo_loss(logp, prox, behav, adv, torch.ones(3), correction="nope")  # type: ignore[arg-type]


def test_truncated_is_weight_and_helpers():
    w = truncated_is_weight(torch.tensor([LN(3.0), LN(0.5), LN(2.0)]), torch.zeros(3), cap=2.0)
    assert w.tolist() == pytest.approx([2.0, 0.5, 2.0])
    assert not w.requires_grad
    assert clipped_mask(torch.tensor([1.3, 0.7, 1.3, 0.7]), torch.tensor([1.0, -1.0, -1.0, 1.0]), 0.2, 0.2).tolist() \
        == [True, True, False, False]
    # k3 of identical distributions is 0, else > 0
    assert float(kl_k3(torch.tensor(0.0), torch.tensor(0.0))) == 0.0
    assert float(kl_k3(torch.tensor(LN(0.5)), torch.tensor(0.0))) == pytest.approx(0.5 - 1 - LN(0.5))
    # token_mean with an explicit denominator (micro-batches of one big batch)
    x, m = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.0, 1.0])
    assert float(token_mean(x, m)) == 2.0
    assert float(token_mean(x, m, denom=8)) == 0.5
    assert add_sums({"a": 1.0}, {"a": 2.0, "b": 1.0}) == {"a": 3.0, "b": 1.0}


def test_masked_tokens_do_not_count():
    behav = torch.zeros(4)
    logp = torch.tensor([0.0, 0.0, 5.0, 0.0], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, 100.0, -1.0])
    mask = torch.tensor([1.0, 1.0, 0.0, 1.0])
    loss, sums = ppo_loss(logp, torch.zeros(4), behav, adv, mask, correction="off")
    assert loss.item() == pytest.approx((-1 - 1 + 1) / 3)
    loss.backward()
    assert float(logp.grad[2]) == 0.0
    assert sums["tokens"] == 3.0


def _ess_case(correction: str, raw_w: list[float], cap: float = 2.0, split: int | None = None) -> dict:
    """summarize() of ppo_loss on tokens with pi_prox / pi_behav = raw_w (r = 1, A = 1), optionally
    as two micro-batches [:split], [split:] whose sums are added."""
    prox = torch.tensor([LN(w) for w in raw_w])
    n = len(raw_w)
    parts = [(0, n)] if split is None else [(0, split), (split, n)]
    sums: dict = {}
    for a, b in parts:
        _, s = ppo_loss(prox[a:b].clone(), prox[a:b], torch.zeros(b - a), torch.ones(b - a), torch.ones(b - a),
                        correction=correction, is_cap=cap)
        add_sums(sums, s)
    return summarize(sums)


def test_effective_sample_size_by_hand():
    # ESS = (sum w)^2 / (n sum w^2): 1 when the weights are equal, 1/n when one weight carries everything.
    # raw w = 1, 1, 1, 4 with C = 2:
    #   tis  -> w = 1, 1, 1, 2 (truncated): (5)^2 / (4 * 7) = 25/28, truncated 1/4
    #   mask -> the w = 4 token is dropped: w = 1, 1, 1 -> ESS 1, truncated 1/4
    #   off  -> no weight is applied; the raw weights are reported: 7^2 / (4 * 19) = 49/76
    tis = _ess_case("tis", [1.0, 1.0, 1.0, 4.0])
    assert tis["is_ess"] == pytest.approx(25 / 28)
    assert tis["is_weight_mean"] == pytest.approx(5 / 4)
    assert tis["is_truncated_frac"] == pytest.approx(1 / 4)
    mask = _ess_case("mask", [1.0, 1.0, 1.0, 4.0])
    assert mask["is_ess"] == pytest.approx(1.0)
    assert mask["is_truncated_frac"] == pytest.approx(1 / 4)
    off = _ess_case("off", [1.0, 1.0, 1.0, 4.0])
    assert off["is_ess"] == pytest.approx(49 / 76)
    # equal weights of any size: ESS 1; one dominant weight: ESS -> 1/n
    assert _ess_case("tis", [0.5, 0.5, 0.5])["is_ess"] == pytest.approx(1.0)
    assert _ess_case("off", [1e-6, 1e-6, 1e-6, 1.0])["is_ess"] == pytest.approx(1 / 4, rel=1e-4)
    # summed over micro-batches it is the ESS of the whole batch, not a mean of per-batch ESS
    assert _ess_case("tis", [1.0, 1.0, 1.0, 4.0], split=1)["is_ess"] == pytest.approx(25 / 28)


def test_correction_off_does_not_use_the_proximal_logprobs():
    # off: the loss and its gradient are the same whatever pi_prox is (plain PPO against pi_behav)
    behav = torch.tensor([LN(0.5), LN(0.2), LN(0.9)])
    adv = torch.tensor([1.0, -1.0, 0.5])
    grads, losses = [], []
    for prox in (torch.zeros(3), torch.tensor([LN(3.0), LN(0.1), LN(0.7)])):
        logp = torch.tensor([LN(0.55), LN(0.19), LN(0.95)], requires_grad=True)
        loss, _ = ppo_loss(logp, prox, behav, adv, torch.ones(3), correction="off")
        loss.backward()
        losses.append(loss.item())
        grads.append(logp.grad.tolist())
    assert losses[0] == losses[1]
    assert grads[0] == grads[1]
    # tis: changing pi_prox changes the update
    l_tis = [ppo_loss(torch.tensor([LN(0.55), LN(0.19), LN(0.95)]), prox, behav, adv, torch.ones(3),
                      correction="tis")[0].item() for prox in (torch.zeros(3), torch.tensor([LN(3.0), LN(0.1), 0.0]))]
    assert l_tis[0] != pytest.approx(l_tis[1])


def test_sequence_mean_aggregation_weighs_each_response_once():
    # responses of 1 and 3 tokens, per-token loss -A (r = w = 1): A = +1 (short), -1 (long)
    # token mean: (-1 + 3 * 1) / 4 = 0.5; sequence mean of token means: (-1 + 1) / 2 = 0
    from dora.exec.losses import sequence_token_weights

    w = sequence_token_weights([1, 3])
    assert w.tolist() == pytest.approx([1.0, 1 / 3, 1 / 3, 1 / 3])
    z = torch.zeros(4)
    adv = torch.tensor([1.0, -1.0, -1.0, -1.0])
    tok, _ = ppo_loss(z, z, z, adv, torch.ones(4), correction="tis")
    seq, sums = ppo_loss(z, z, z, adv, torch.ones(4), correction="tis", token_weight=w, denom=2)
    assert tok.item() == pytest.approx(0.5)
    assert seq.item() == pytest.approx(0.0, abs=1e-6)
    assert summarize(sums)["tokens"] == 4  # statistics stay per token
