"""The Ray actor wrapper: an engine in its own process, driven through actor calls
(submit, poll, abort, in-memory weight load shipped through the object store)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from dora.exec.engine import EngineConfig, GenRequest, SamplingConfig  # noqa: E402
from dora.exec.engine.actor import remote_engine  # noqa: E402


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _poll_until(actor, ids, timeout=120.0):
    got, deadline = {}, time.monotonic() + timeout
    while set(ids) - set(got):
        assert time.monotonic() < deadline, f"timed out waiting for {set(ids) - set(got)}"
        for r in ray.get(actor.poll.remote(0.5)):
            got[r.request_id] = r
    return got


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_engine_in_a_ray_actor(ray_local, tiny_ckpt, backend):
    if backend == "vllm":
        pytest.importorskip("vllm")
    from dora.exec.logprobs import load_model, sequence_logprobs

    cfg = EngineConfig(model=str(tiny_ckpt), backend=backend, device="cpu", max_model_len=1024, max_num_seqs=16)
    actor = remote_engine(cfg, instance=3)
    info = ray.get(actor.ready.remote(), timeout=300)
    assert info["backend"] == backend and info["instance"] == 3 and info["version"] == 0
    ray.get(actor.submit.remote([GenRequest(f"r{i}", [50, 51, 52], 12, 0, SamplingConfig(seed=i), stop_token_ids=())
                                 for i in range(4)]
                                + [GenRequest("long", [50, 51, 52], 900, 0, SamplingConfig(seed=9), stop_token_ids=())]))
    got = _poll_until(actor, [f"r{i}" for i in range(4)])
    assert all(len(r.token_ids) == 12 and r.versions == [0] * 12 for r in got.values())
    (part,) = ray.get(actor.abort.remote(["long"]))
    assert part.finish_reason == "abort" and 0 < len(part.token_ids) < 900

    model = load_model(tiny_ckpt)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    seconds = ray.get(actor.load_weights.remote(1, model.state_dict()))
    assert seconds > 0 and ray.get(actor.version.remote()) == 1
    ray.get(actor.submit.remote([GenRequest("v1", [50, 51, 52], 24, 1, SamplingConfig(seed=1), stop_token_ids=())]))
    r = _poll_until(actor, ["v1"])["v1"]
    ref = sequence_logprobs(model, [r.prompt_ids + r.token_ids], [3])[0]
    assert r.versions == [1] * 24 and float((ref - torch.tensor(r.logprobs)).abs().max()) <= 1e-3
    stats = ray.get(actor.stats.remote())
    assert stats["weight_loads"][-1][1] == 1 and stats["steps"]
    ray.get(actor.close.remote())
    ray.kill(actor)
