"""Trainer: logprobs, dynamic micro-batching, RL steps, publishing, checkpoints, staleness."""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

from dora.exec.config import LossConfig, TrainerConfig  # noqa: E402
from dora.exec.logprobs import load_model, sequence_logprobs, token_budget_batches  # noqa: E402
from dora.exec.rewards import count_reward  # noqa: E402
from dora.exec.tasks import count_task, tokenize_prompts  # noqa: E402
from dora.exec.hf_rollout import hf_rollout  # noqa: E402
from dora.exec.trainer import Trainer, Trajectory  # noqa: E402


def _random_batch(n_groups=3, group_size=4, seed=0, version=0) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        prompt = [rng.randrange(4, 300) for _ in range(rng.randint(3, 9))]
        for _ in range(group_size):
            resp = [rng.randrange(4, 300) for _ in range(rng.randint(1, 40))] + [2]
            out.append(Trajectory(prompt, resp, [-5.0 + rng.uniform(-0.3, 0.3) for _ in resp], version, g,
                                  reward=rng.random(), trajectory_id=len(out)))
    return out


def test_token_budget_batches():
    lengths = [5, 50, 7, 20, 20, 3, 100, 1]
    batches = token_budget_batches(lengths, 60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        padded = max(lengths[i] for i in b) * len(b)
        assert padded <= 60 or len(b) == 1  # only an over-long item stands alone
    assert [6] in batches  # 100 > budget: its own batch
    assert token_budget_batches([], 10) == []
    with pytest.raises(ValueError):
        token_budget_batches([1], 0)


def test_sequence_logprobs_batched_equals_one_by_one(tiny_model_dir):
    model = load_model(tiny_model_dir)
    batch = _random_batch()
    seqs = [t.prompt_ids + t.response_ids for t in batch]
    plens = [len(t.prompt_ids) for t in batch]
    together = sequence_logprobs(model, seqs, plens)
    tiny_budget = sequence_logprobs(model, seqs, plens, max_batch_tokens=40)
    for s, p, a, b in zip(seqs, plens, together, tiny_budget):
        alone = sequence_logprobs(model, [s], [p])[0]
        assert a.dtype == torch.float32 and a.device.type == "cpu" and a.shape == (len(s) - p,)
        assert torch.allclose(a, alone, atol=1e-5)
        assert torch.allclose(b, alone, atol=1e-5)
    # by hand for one sequence: log_softmax of the full forward
    s, p = seqs[0], plens[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([s])).logits[0]
    ref = torch.log_softmax(logits[p - 1 : len(s) - 1], -1).gather(-1, torch.tensor(s[p:])[:, None])[:, 0]
    assert torch.allclose(together[0], ref, atol=1e-5)


def test_micro_batching_gives_the_same_gradient(tiny_model_dir):
    batch = _random_batch(n_groups=4, group_size=3, seed=1)
    big = Trainer(tiny_model_dir, TrainerConfig(device="cpu", micro_batch_tokens=1_000_000))
    small = Trainer(tiny_model_dir, TrainerConfig(device="cpu", micro_batch_tokens=64))
    s_big = big.accumulate_gradients(batch)
    s_small = small.accumulate_gradients(batch)
    assert s_big["tokens"] == s_small["tokens"] == sum(len(t.response_ids) for t in batch)
    n_micro = len(small._micro_batches(batch))
    assert n_micro > 3
    for (name, p1), (_, p2) in zip(big.model.named_parameters(), small.model.named_parameters()):
        assert p1.grad is not None, name
        assert torch.allclose(p1.grad, p2.grad, atol=1e-5, rtol=1e-4), name
    assert big.version == small.version == 0


def test_sequence_mean_micro_batching_and_zero_variance_groups(tiny_model_dir, tmp_path):
    """seq_mean_token_mean gives the same gradient in one or many micro-batches and differs from the token
    mean; the step reports the fraction of groups whose rewards are all equal and snapshots every k-th version."""
    from dora.exec.trainer import zero_variance_fraction

    batch = _random_batch(n_groups=4, group_size=3, seed=1)
    seq = LossConfig(aggregation="seq_mean_token_mean")
    big = Trainer(tiny_model_dir, TrainerConfig(device="cpu", micro_batch_tokens=1_000_000, loss=seq))
    small = Trainer(tiny_model_dir, TrainerConfig(device="cpu", micro_batch_tokens=64, loss=seq))
    tok = Trainer(tiny_model_dir, TrainerConfig(device="cpu", micro_batch_tokens=1_000_000))
    big.accumulate_gradients(batch)
    small.accumulate_gradients(batch)
    tok.accumulate_gradients(batch)
    grads = [[p.grad for p in t.model.parameters()] for t in (big, small, tok)]
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(grads[0], grads[1]))
    assert not all(torch.allclose(a, c, atol=1e-5, rtol=1e-4) for a, c in zip(grads[0], grads[2]))
    for t in batch[:3]:
        t.reward = 0.5  # group 0: no variance
    assert zero_variance_fraction(batch) == 0.25
    snap = Trainer(tiny_model_dir, TrainerConfig(device="cpu", snapshot_every=2, snapshot_dir=str(tmp_path / "s")))
    for _ in range(3):
        st = snap.step(batch)
    assert st["zero_var_groups"] == 0.25
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["v2"]


def test_rl_steps_on_the_count_task(tiny_model_dir, tiny_tokenizer):
    """Sampled responses (reward ~0 for a random model) plus one correct answer per group, as an
    off-policy sample: two steps raise the correct answers' log-likelihood and change the weights."""
    from dora.exec.tasks import sft_pairs

    trainer = Trainer(tiny_model_dir, TrainerConfig(device="cpu", lr=1e-3, micro_batch_tokens=2048))
    examples = count_task(4, seed=5)
    ids = tokenize_prompts(tiny_tokenizer, examples)
    correct = sft_pairs(tiny_tokenizer, examples)

    def correct_logp() -> float:
        lps = sequence_logprobs(trainer.model, [p + t for p, t in correct], [len(p) for p, _ in correct])
        return float(sum(lp.sum() for lp in lps))

    before = {k: v.clone() for k, v in trainer.state_dict_for_publish().items()}
    ll_before = correct_logp()
    for step in range(2):
        rolled = hf_rollout(trainer.model, tiny_tokenizer, ids, [e.prompt_id for e in examples], group_size=3,
                            max_new_tokens=24, seed=step, version=trainer.version)
        batch = []
        for traj, text in rolled:
            traj.reward = count_reward(text, examples[traj.group_id].answer)
            batch.append(traj)
        # generate's logprobs agree with the trainer's recomputation of the same weights
        prox = trainer.proximal_logprobs(batch[:2])
        assert torch.allclose(prox[0].cpu(), torch.tensor(batch[0].behaviour_logprobs), atol=1e-4)
        ref = sequence_logprobs(trainer.model, [p + t for p, t in correct], [len(p) for p, _ in correct])
        for e, (p, t), lp in zip(examples, correct, ref):
            batch.append(Trajectory(p, t, lp.tolist(), trainer.version, e.prompt_id, 1.0))
        stats = trainer.step(batch)
        assert stats["version"] == step + 1
        assert stats["staleness_max"] == 0
        assert stats["tokens"] == sum(len(t.response_ids) for t in batch)
        assert all(v == v for v in stats.values())  # no NaN
        assert stats["is_weight_mean"] == pytest.approx(1.0, abs=1e-3)  # same weights: w = 1
        assert stats["adv_abs_mean"] > 0
    after = trainer.state_dict_for_publish()
    assert trainer.version == 2
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert correct_logp() > ll_before + 1.0


def test_staleness_is_recorded_and_future_versions_refused(tiny_model_dir):
    trainer = Trainer(tiny_model_dir, TrainerConfig(device="cpu"))
    trainer.version = 3
    batch = _random_batch(n_groups=2, group_size=2)
    for t, v in zip(batch, [3, 2, 1, 1]):
        t.version = v
    stats = trainer.step(batch)
    assert stats["staleness_mean"] == pytest.approx((0 + 1 + 2 + 2) / 4)
    assert stats["staleness_max"] == 2
    rec = trainer.staleness[-1]
    assert (rec.trainer_version, rec.histogram) == (3, {0: 1, 1: 1, 2: 2})
    assert trainer.staleness_metrics() == {"staleness_mean": 1.25, "staleness_max": 2.0}
    future = _random_batch(n_groups=1, group_size=2, version=9)
    with pytest.raises(ValueError, match="newer"):
        trainer.step(future)
    bad = _random_batch(n_groups=1, group_size=2)
    bad[0].behaviour_logprobs = bad[0].behaviour_logprobs[:-1]
    with pytest.raises(ValueError, match="behaviour logprobs"):
        trainer.step(bad)


def test_a_non_finite_gradient_skips_the_update_and_keeps_the_weights(tiny_model_dir):
    trainer = Trainer(tiny_model_dir, TrainerConfig(device="cpu", lr=1e-2, warmup_steps=0, minibatches=2))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    first = next(trainer.model.parameters())
    hook = first.register_hook(lambda g: g * float("inf"))  # every gradient norm of this step is inf
    stats = trainer.step(_random_batch(seed=3))
    assert (stats["version"], stats["skipped_updates"]) == (1, 2) and not math.isfinite(stats["grad_norm"])
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # neither minibatch touched a weight
    hook.remove()
    stats = trainer.step(_random_batch(seed=4))
    assert stats["skipped_updates"] == 0 and all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())
    assert not torch.equal(before["model.embed_tokens.weight"], trainer.model.state_dict()["model.embed_tokens.weight"])


def test_correction_modes_change_the_update(tiny_model_dir):
    batch = _random_batch(n_groups=2, group_size=3, seed=4)
    grads = {}
    for mode in ("tis", "off"):
        tr = Trainer(tiny_model_dir, TrainerConfig(device="cpu", loss=LossConfig(correction=mode, is_cap=2.0)))
        st = tr.accumulate_gradients(batch)
        grads[mode] = tr.model.model.embed_tokens.weight.grad.clone()
        if mode == "tis":
            # behaviour logprobs ~ -5 are far above the model's ~ -5.9: w = pi_prox/pi_behav < 1
            assert st["is_weight_mean"] < 1.0
    assert not torch.allclose(grads["tis"], grads["off"])


def test_publish_save_and_reload_match(tiny_model_dir, tmp_path):
    trainer = Trainer(tiny_model_dir, TrainerConfig(device="cpu", lr=1e-2))
    trainer.step(_random_batch())
    pub = trainer.state_dict_for_publish()
    assert "lm_head.weight" not in pub  # tied to the embedding, as in the checkpoint
    out = trainer.save_weights(tmp_path / "v1")
    from safetensors.torch import load_file

    saved = load_file(str(out / "model.safetensors"))
    assert set(saved) == set(pub)
    assert all(torch.equal(saved[k], pub[k]) for k in pub)
    reloaded = load_model(out)
    seqs = [[5, 6, 7, 8, 9, 10, 11]]
    a = sequence_logprobs(reloaded, seqs, [3])[0]
    b = sequence_logprobs(trainer.model, seqs, [3])[0]
    assert torch.allclose(a, b, atol=1e-6)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(out))("count 1 to 2 :")["input_ids"]
    assert not list(tmp_path.glob(".v1.tmp-*"))  # no half-written directory left


def test_checkpoint_resume_continues_identically(tiny_model_dir, tmp_path):
    cfg = TrainerConfig(device="cpu", lr=1e-2)
    a = Trainer(tiny_model_dir, cfg)
    a.step(_random_batch(seed=1))
    a.save_checkpoint(tmp_path / "ckpt")
    b = Trainer(tiny_model_dir, cfg)
    b.load_checkpoint(tmp_path / "ckpt")
    assert (b.version, b.steps, len(b.staleness)) == (1, 1, 1)
    nxt = _random_batch(seed=2, version=1)
    a.step(nxt)
    b.step(nxt)
    pa, pb = a.state_dict_for_publish(), b.state_dict_for_publish()
    assert all(torch.allclose(pa[k], pb[k], atol=1e-7) for k in pa)
    from dora.errors import InputError

    with pytest.raises(InputError, match="missing"):
        b.load_checkpoint(tmp_path / "nothing")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_step_and_publish(tiny_model_dir):
    """GPU path (one device): bf16 autocast over fp32 weights; publishes fp32 CPU tensors."""
    trainer = Trainer(tiny_model_dir, TrainerConfig(device="cuda", lr=1e-3))
    # one process, no group: no sharding (FSDP2 over ranks, CPU included: tests/exec/test_trainer_ranks.py)
    assert trainer.device.type == "cuda" and (trainer.world, trainer.fsdp) == (1, False)
    batch = _random_batch(n_groups=3, group_size=4, seed=7)
    stats = trainer.step(batch)
    assert stats["version"] == 1 and all(v == v for v in stats.values())
    pub = trainer.state_dict_for_publish()
    assert all(t.device.type == "cpu" and t.dtype == torch.float32 for t in pub.values())
    # bf16 logprobs of the trainer agree with an fp32 CPU copy of the same weights to bf16 precision
    cpu = load_model(tiny_model_dir)
    cpu.load_state_dict(pub, strict=False)
    seqs = [t.prompt_ids + t.response_ids for t in batch]
    plens = [len(t.prompt_ids) for t in batch]
    ref = sequence_logprobs(cpu, seqs, plens)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        gpu = sequence_logprobs(trainer.model, seqs, plens)
    assert max(float((a - b).abs().max()) for a, b in zip(ref, gpu)) < 0.1


def test_step_reports_ess_and_clip_fraction(tiny_model_dir):
    """A stale-looking batch (behaviour logprobs unlike the trainer's): the step's statistics carry the
    effective sample size of the IS weights (< 1: they are unequal) and the clipped-token fraction, as
    the executor writes them to steps.csv; with the correction off the weights are reported, not used."""
    for mode in ("tis", "off"):
        tr = Trainer(tiny_model_dir, TrainerConfig(device="cpu", lr=1e-2, ppo_epochs=2,
                                                   loss=LossConfig(correction=mode, is_cap=2.0)))
        st = tr.step(_random_batch(n_groups=2, group_size=3, seed=7))
        assert 0.0 < st["is_ess"] < 1.0
        assert 0.0 <= st["clip_frac"] <= 1.0
        assert 0.0 <= st["is_truncated_frac"] <= 1.0
        # two epochs: the second pass sees pi_theta != pi_prox, so some tokens leave the clip range
        assert st["kl_theta_prox"] > 0


def test_trainer_scores_at_its_temperature(tiny_model_dir, tiny_tokenizer):
    """TrainerConfig.temperature: the trainer's log-probs are log_softmax(logits / T), equal to those
    hf_rollout reports with logprob_temperature=T (the sampling policy's); T <= 0 is refused."""
    from dora.config import build

    ex = count_task(2, seed=4)
    ids = tokenize_prompts(tiny_tokenizer, ex)
    trainer = Trainer(tiny_model_dir, TrainerConfig(device="cpu", temperature=0.7))
    rolled = hf_rollout(trainer.model, tiny_tokenizer, ids, [0, 1], group_size=2, max_new_tokens=8, seed=3,
                        temperature=0.7, logprob_temperature=0.7)
    batch = [t for t, _ in rolled]
    for t, lp in zip(batch, trainer.proximal_logprobs(batch)):
        assert torch.allclose(lp.cpu(), torch.tensor(t.behaviour_logprobs), atol=1e-4)
    raw = hf_rollout(trainer.model, tiny_tokenizer, ids, [0, 1], group_size=2, max_new_tokens=8, seed=3,
                     temperature=0.7)
    assert [t.response_ids for t, _ in raw] == [t.response_ids for t in batch]  # same samples, other logprobs
    assert not torch.allclose(torch.tensor(raw[0][0].behaviour_logprobs), torch.tensor(batch[0].behaviour_logprobs))
    from dora.errors import InputError

    with pytest.raises(InputError, match="temperature"):
        build(TrainerConfig, {"temperature": 0})


def test_resume_reads_again_a_checkpoint_replaced_under_it(tiny_model_dir, tmp_path):
    """A killed trainer's save can land while its replacement resumes (in-process actors cannot be
    stopped mid-call): the checkpoint renamed over the one being read is read again, so weights,
    optimizer and data state come from one save, not the weights of one and the data state of the next."""
    from dora.exec.trainer_actor import TrainerActor

    cfg = TrainerConfig(device="cpu", lr=1e-2)
    old = Trainer(tiny_model_dir, cfg)
    old.step(_random_batch(seed=1))
    ckpt = tmp_path / "checkpoint"
    old.save_checkpoint(ckpt, data_state={"version": 1, "trained_groups": [0, 1, 2]})
    actor = TrainerActor(str(tiny_model_dir), cfg, str(tmp_path))
    load, reads = actor.trainer.load_checkpoint, []

    def load_then_replaced(d):
        load(d)
        reads.append(actor.trainer.version)
        if len(reads) == 1:  # the old trainer's next save lands between the weights and the data state
            old.step(_random_batch(seed=2, version=1))
            old.save_checkpoint(ckpt, data_state={"version": 2, "trained_groups": [0, 1, 2, 3]})

    actor.trainer.load_checkpoint = load_then_replaced
    state = actor.resume()
    assert reads == [1, 2]
    assert state["version"] == actor.trainer.version == 2 and state["trained_groups"] == [0, 1, 2, 3]
    pa, pb = old.state_dict_for_publish(), actor.trainer.state_dict_for_publish()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
