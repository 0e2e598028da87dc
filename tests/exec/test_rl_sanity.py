"""RL sanity: the real trainer (GRPO advantages, decoupled PPO loss, AdamW) raises a trivial reward.

A random-init tiny model samples 3 tokens per prompt with transformers generate; the reward depends
on the first two tokens of the response only. If the loss had the wrong sign, or the trainer's
log-probs were shifted by one token against the sampled ones, the reward would not rise; the update
is also checked against a hand-written policy gradient.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dora.exec.config import TrainerConfig  # noqa: E402
from dora.exec.logprobs import forward_logprobs  # noqa: E402
from dora.exec.tasks import count_task, tokenize_prompts  # noqa: E402
from dora.exec.hf_rollout import hf_rollout  # noqa: E402
from dora.exec.trainer import Trainer  # noqa: E402

HALF = 180  # token ids below this: half of the tiny vocabulary


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the runs are tiny, and extra threads only contend on a shared machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _run(model_dir, tokenizer, reward_fn, *, steps: int, lr: float, temperature: float = 1.0) -> list[float]:
    """`steps` GRPO steps of 8 prompts x 8 samples (3 new tokens each); the per-step mean reward."""
    trainer = Trainer(model_dir, TrainerConfig(device="cpu", lr=lr, warmup_steps=0, seed=0,
                                               temperature=temperature))
    examples = count_task(64, seed=3)
    ids = tokenize_prompts(tokenizer, examples)
    rewards = []
    for step in range(steps):
        sel = [(step * 8 + i) % len(ids) for i in range(8)]
        rolled = hf_rollout(trainer.model, tokenizer, [ids[i] for i in sel], list(range(8)), group_size=8,
                            max_new_tokens=3, seed=step, version=trainer.version, temperature=temperature,
                            logprob_temperature=temperature)
        batch = []
        for traj, _ in rolled:
            traj.reward = reward_fn(traj.response_ids)
            batch.append(traj)
        rewards.append(trainer.step(batch)["reward_mean"])
    return rewards


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


@pytest.mark.parametrize("temperature, first_low", [(1.0, True), (0.7, False)])
def test_grpo_raises_a_two_token_reward(tiny_model_dir, tiny_tokenizer, temperature, first_low):
    """Reward 0.5 when the first response token is in one half of the vocabulary plus 0.5 when the
    second is in the other half (~0.5 for a random model): 40 steps take it above 0.75, sampling at T
    and the trainer scoring at T. The halves differ between the two positions, so a trainer whose
    log-probs were one position off would push the second token toward the first one's half instead."""
    def reward(resp):
        first = len(resp) > 0 and (resp[0] < HALF) == first_low
        second = len(resp) > 1 and (resp[1] < HALF) != first_low
        return 0.5 * first + 0.5 * second

    rewards = _run(tiny_model_dir, tiny_tokenizer, reward, steps=40, lr=1e-2, temperature=temperature)
    assert _mean(rewards[:5]) < 0.7
    assert _mean(rewards[-10:]) > 0.75
    assert _mean(rewards[-10:]) > _mean(rewards[:10]) + 0.15


def test_one_step_equals_hand_written_policy_gradient(tiny_model_dir, tiny_tokenizer):
    """On-policy, one minibatch, no clipping active: the trainer's gradient is that of
    -sum_i A_i * sum_t log pi(y_it) / (number of tokens), A = group-normalised reward (by hand),
    and its step is AdamW's step on it."""
    examples = count_task(4, seed=7)
    ids = tokenize_prompts(tiny_tokenizer, examples)
    cfg = TrainerConfig(device="cpu", lr=1e-3, warmup_steps=0, grad_clip=0.0)
    trainer = Trainer(tiny_model_dir, cfg)
    rolled = hf_rollout(trainer.model, tiny_tokenizer, ids, list(range(4)), group_size=4, max_new_tokens=6, seed=1)
    batch = []
    for k, (traj, _) in enumerate(rolled):
        traj.reward = float(k % 3 == 0) + 0.1 * len(traj.response_ids)
        batch.append(traj)
    ref = Trainer(tiny_model_dir, cfg)
    r = torch.tensor([t.reward for t in batch]).view(4, 4)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).flatten()
    lps = forward_logprobs(ref.model, [t.prompt_ids + t.response_ids for t in batch],
                           [len(t.prompt_ids) for t in batch])
    loss = -sum(a * lp.sum() for a, lp in zip(adv, lps)) / sum(len(lp) for lp in lps)
    ref.optimizer.zero_grad()
    loss.backward()
    trainer.accumulate_gradients(batch)
    for (name, p), q in zip(trainer.model.named_parameters(), ref.model.parameters()):
        # float32 summed in another order (padded batch vs one sequence at a time) moves an entry by
        # ~1e-7 of the tensor's largest one; a wrong sign, token offset or normaliser moves it by ~1
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5 * float(q.grad.abs().max())), name
    ref.optimizer.step()
    trainer.step(batch)
    got, want = trainer.state_dict_for_publish(), ref.state_dict_for_publish()
    # AdamW's first step is ~ lr * sign(grad): a wrong sign would differ by ~2e-3 here
    assert max(float((got[k] - want[k]).abs().max()) for k in got) < 1e-4
    start = Trainer(tiny_model_dir, cfg).state_dict_for_publish()
    assert max(float((got[k] - start[k]).abs().max()) for k in got) > 5e-4
