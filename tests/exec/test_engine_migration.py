"""Migration: abort a running trajectory on engine A, resume it on engine B (same version)
from prompt + generated tokens. The trajectory stays continuous: same prefix, one version,
and every logprob (A's part and B's part) equals a from-scratch trainer recomputation."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dora.exec.engine import GenRequest, SamplingConfig  # noqa: E402
from dora.exec.logprobs import sequence_logprobs  # noqa: E402

PROMPT = [60, 61, 62, 63, 64, 65, 66, 67]
TOTAL = 300


def test_migrated_trajectory_is_continuous(engine_pair, collect, wait_tokens, reference_model, record_property):
    a, b = engine_pair.a, engine_pair.b
    v = engine_pair.load_both(reference_model.state_dict())
    a.submit(GenRequest("mig", PROMPT, TOTAL, v, SamplingConfig(seed=5), stop_token_ids=()))
    wait_tokens(a, "mig", 20)
    part = a.abort("mig")
    n = len(part.token_ids)
    assert part.finish_reason == "abort" and 20 <= n < TOTAL
    assert part.versions == [v] * n and len(part.logprobs) == n
    assert a.abort("mig") is None and "mig" not in a.running_ids()

    b_reprefill = b.get_stats()["reprefill_tokens"]
    b.submit(GenRequest.resume(part, TOTAL, SamplingConfig(seed=6), stop_token_ids=()))
    res = collect(b, ["mig"])["mig"]
    assert res.finish_reason == "length" and len(res.token_ids) == TOTAL
    assert res.token_ids[:n] == part.token_ids and res.logprobs[:n] == part.logprobs
    assert res.versions == [v] * TOTAL and res.version == v  # C1: one version throughout
    assert res.reprefill_tokens == len(PROMPT) + n
    assert b.get_stats()["reprefill_tokens"] - b_reprefill == len(PROMPT) + n

    ref = sequence_logprobs(reference_model, [PROMPT + res.token_ids], [len(PROMPT)])[0]
    diff = (torch.tensor(res.logprobs) - ref).abs()
    assert float(diff[n:].max()) <= 1e-3, "resumed part disagrees with the trainer"
    assert float(diff[:n].max()) <= 1e-3, "source part disagrees with the trainer"
    assert not any(r.request_id == "mig" for r in a.poll())  # the aborted copy never reports
    record_property("reprefill_tokens", res.reprefill_tokens)


def test_resume_refuses_an_older_version(engine_pair, wait_tokens, collect):
    """C1 guard: a trajectory of version v cannot continue on an engine that moved past v."""
    from dora.exec.logprobs import load_model

    a, b = engine_pair.a, engine_pair.b
    state = load_model(engine_pair.ckpt).state_dict()
    v = engine_pair.load_both(state)
    a.submit(GenRequest("old", PROMPT, 200, v, SamplingConfig(seed=7), stop_token_ids=()))
    wait_tokens(a, "old", 5)
    part = a.abort("old")
    b.load_weights(v + 1, state)
    with pytest.raises(ValueError, match="versions only move forward"):
        b.submit(GenRequest.resume(part, 200, SamplingConfig(seed=8), stop_token_ids=()))
    a.load_weights(v + 1, state)  # keep the pair on one version for other tests

