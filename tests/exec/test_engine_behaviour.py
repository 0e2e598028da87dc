"""Engine behaviour shared by both backends: results finish one by one, abort returns the
partial trajectory, stop tokens, per-token versions, versions loaded in drain / interrupt mode."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

from dora.errors import InputError  # noqa: E402
from dora.exec.engine import EngineBusyError, GenRequest, SamplingConfig  # noqa: E402

PROMPT = [70, 71, 72, 73, 74]


def req(rid, n, version, seed=0, **kw):
    return GenRequest(rid, PROMPT, n, version, SamplingConfig(seed=seed), stop_token_ids=kw.pop("stop", ()), **kw)


def test_short_requests_finish_before_long_ones(engine_pair, collect):
    e = engine_pair.a
    lengths = {"len256": 256, "len4": 4, "len64": 64, "len16": 16}
    for rid, n in lengths.items():
        e.submit(req(rid, n, e.version, seed=n))
    order: list[str] = []
    got = collect(e, lengths, order=order)
    assert order == ["len4", "len16", "len64", "len256"]
    for rid, n in lengths.items():
        r = got[rid]
        assert r.finish_reason == "length" and len(r.token_ids) == n == len(r.logprobs)
        assert r.versions == [e.version] * n
        assert all(lp <= 0.0 for lp in r.logprobs)
    assert got["len4"].t_finish < got["len256"].t_finish


def test_abort_returns_partial_and_nothing_later(engine_pair, collect, wait_tokens):
    e = engine_pair.a
    e.submit(req("ab", 800, e.version))
    e.submit(req("keep", 30, e.version))
    wait_tokens(e, "ab", 3)
    part = e.abort("ab")
    assert part is not None and part.finish_reason == "abort"
    assert 3 <= len(part.token_ids) < 800 and len(part.logprobs) == len(part.token_ids)
    assert e.abort("ab") is None and e.abort("never-submitted") is None
    got = collect(e, ["keep"])  # fails if the aborted request still reports
    assert got["keep"].finish_reason == "length"
    time.sleep(0.3)
    assert e.poll() == []


def test_stop_token_ends_and_is_included(engine_pair, collect):
    import json

    e = engine_pair.a
    vocab = json.loads((engine_pair.ckpt / "config.json").read_text())["vocab_size"]
    every_id = tuple(range(vocab))  # the whole vocabulary: the first sampled token stops
    e.submit(req("stop", 50, e.version, stop=every_id))
    r = collect(e, ["stop"])["stop"]
    assert r.finish_reason == "stop" and len(r.token_ids) == 1 and r.token_ids[0] in every_id
    assert len(r.logprobs) == 1 and r.logprobs[0] <= 0.0


def test_versions_drain_and_interrupt(engine_pair, collect, wait_tokens, reference_model):
    """A request for a later version waits for it; 'drain' refuses to load under running work;
    'interrupt' (AReaL partial rollout) continues in-flight work under the new version."""
    e = engine_pair.a
    v = e.version
    state = reference_model.state_dict()
    e.submit(req("run", 600, v, seed=1))
    e.submit(req("later", 20, v + 1, seed=2))
    assert set(e.running_ids()) == {"run", "later"} and e.num_running() == 1
    snap = wait_tokens(e, "run", 5)
    with pytest.raises(EngineBusyError):
        e.load_weights(v + 1, state, mode="drain")
    with pytest.raises(ValueError, match="already running"):
        e.submit(req("run", 5, v))
    e.load_weights(v + 1, state, mode="interrupt")
    assert e.version == v + 1
    with pytest.raises(ValueError, match="versions only move forward"):
        e.submit(req("older", 5, v))
    got = collect(e, ["run", "later"])
    run = got["run"]
    k = run.versions.count(v)
    assert k >= len(snap.token_ids) and run.versions == [v] * k + [v + 1] * (600 - k)
    assert run.reprefill_tokens == len(PROMPT) + k and run.version == v + 1
    assert got["later"].versions == [v + 1] * 20


def test_bad_requests_are_refused(engine_pair):
    e = engine_pair.a
    with pytest.raises(InputError, match="prompt_ids is empty"):
        e.submit(GenRequest("x", [], 5, e.version))
    with pytest.raises(InputError, match="max_model_len"):
        e.submit(GenRequest("x", PROMPT, 5000, e.version))
    with pytest.raises(InputError, match="top_p"):
        e.submit(GenRequest("x", PROMPT, 5, e.version, SamplingConfig(top_p=0.0)))
    with pytest.raises(InputError, match="safetensors"):
        e.load_checkpoint(e.version + 1, "/nonexistent")


def test_stats_for_calibration(engine_pair, collect):
    e = engine_pair.a
    for i in range(8):
        e.submit(req(f"st{i}", 40, e.version, seed=i))
    collect(e, [f"st{i}" for i in range(8)])
    s = e.get_stats()
    assert s["startup_s"] > 0 and s["backend"] == engine_pair.backend
    busy = [row for row in s["steps"] if row[1] >= 8 and row[5] > 0]
    assert busy, "no decode step with 8 running sequences was timed"
    t, running, ctx, prefill, decode, dt = busy[-1]
    assert ctx >= running * len(PROMPT) and decode >= 1
    assert s["weight_loads"] and s["generated_tokens"] > 0


def test_kv_in_use_counts_running_requests_only(engine_pair, wait_tokens):
    """What KVRead reports for an engine: prompt + generated tokens of its running requests;
    a request held for a version not loaded yet holds no KV."""
    e = engine_pair.a
    e.submit(req("kv-run", 800, e.version))
    e.submit(req("kv-held", 10, e.version + 1))
    before = wait_tokens(e, "kv-run", 3)
    used = e.kv_in_use()
    after = e.peek("kv-run")
    assert len(PROMPT) + len(before.token_ids) <= used <= len(PROMPT) + len(after.token_ids)
    assert e.abort("kv-run") is not None and e.abort("kv-held") is not None
    assert e.kv_in_use() == 0


def test_warm_up_leaves_nothing_behind(engine_pair):
    """make_engine warms an engine up (the first forward's one-off cost falls in start-up, not in
    a run's first step); the throwaway requests leave no result, request or statistic behind."""
    e = engine_pair.a
    version = e.version
    dt = e.warm_up()
    assert dt > 0 and e.poll() == [] and e.running_ids() == [] and e.version == version
    s = e.get_stats()
    assert s["steps"] == [] and s["prefills"] == [] and s["weight_loads"] == []
    assert s["finished"] == 0 and s["generated_tokens"] == 0 and s["startup_s"] >= dt
