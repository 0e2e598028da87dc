"""Shared fixtures of the executor tests: a tiny random-init checkpoint built once per session."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Qwen2 checkpoint (random init, seed 0, no warm-start) in a session temp dir."""
    from dora.exec.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


# ---- rollout-engine fixtures (tests/exec/test_engine_*.py) --------------------------------
# Engines are expensive (vLLM: 30-80 s start-up on 2 cores), so each backend's pair is built
# once per session and shared by every engine test; tests that need known weights load them
# first (as a new version) instead of assuming the engines' state.


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_model_dir):
    """The tiny checkpoint the engine tests serve (the shared session one)."""
    return tiny_model_dir


class EnginePair:
    """Two engines of one backend on the same checkpoint (for migration) and a helper."""

    def __init__(self, backend, ckpt, a, b):
        self.backend, self.ckpt, self.a, self.b = backend, ckpt, a, b

    def load_both(self, state: dict) -> int:
        """Load the same named tensors on both engines as a fresh common version; returns it."""
        v = max(self.a.version, self.b.version) + 1
        for e in (self.a, self.b):
            e.load_weights(v, state)
        return v


def _engine_config(backend, ckpt, **kw):
    import os

    from dora.exec.engine import EngineConfig

    # DORA_TEST_DEVICE=cuda runs the hf engines on a GPU (the references stay fp32 on CPU)
    device = os.environ.get("DORA_TEST_DEVICE", "cpu") if backend == "hf" else "cpu"
    return EngineConfig(model=str(ckpt), backend=backend, device=device, dtype="float32", max_num_seqs=64,
                        max_model_len=1024, seed=0, **kw)


@pytest.fixture(scope="session", params=["hf", "vllm"])
def engine_pair(request, tiny_ckpt, tmp_path_factory):
    """(A, B) engines of one backend, both backends in the default suite."""
    if request.param == "vllm":
        pytest.importorskip("vllm")
    from dora.exec.engine import make_engine

    # vllm: both share a KV store, so running requests can move with their KV cache (vllm_kv)
    kv = {"kv_store": str(tmp_path_factory.mktemp("kv_store"))} if request.param == "vllm" else {}
    a = make_engine(_engine_config(request.param, tiny_ckpt, **kv))
    b = make_engine(_engine_config(request.param, tiny_ckpt, kv_cache_bytes=128 * 1024 * 1024, **kv))
    yield EnginePair(request.param, tiny_ckpt, a, b)
    a.close()
    b.close()


@pytest.fixture
def reference_model(tiny_ckpt):
    """A fresh fp32 CPU copy of the tiny checkpoint (the trainer-side reference)."""
    from dora.exec.logprobs import load_model

    return load_model(tiny_ckpt, device="cpu")


@pytest.fixture
def collect():
    """collect(engine, ids, timeout, order) -> {id: GenResult}: poll until every id has finished.

    A result for an id not asked for fails the test (engine tests own their engine's traffic)."""
    import time

    def _collect(engine, ids, timeout: float = 180.0, order: list | None = None):
        want, got = set(ids), {}
        deadline = time.monotonic() + timeout
        while want - set(got):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {sorted(want - set(got))}")
            for r in engine.poll(timeout=0.5):
                assert r.request_id in want, f"unexpected result {r.request_id} ({r.finish_reason})"
                got[r.request_id] = r
                if order is not None:
                    order.append(r.request_id)
        return got

    return _collect


@pytest.fixture
def wait_tokens():
    """wait_tokens(engine, id, n): block until the running request has generated >= n tokens."""
    import time

    def _wait(engine, rid, n: int, timeout: float = 120.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snap = engine.peek(rid)
            assert snap is not None, f"{rid} is not running"
            if len(snap.token_ids) >= n:
                return snap
            time.sleep(0.01)
        raise AssertionError(f"{rid}: fewer than {n} tokens after {timeout} s")

    return _wait
