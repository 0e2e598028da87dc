"""Migration with the KV cache (hf backend): export a running trajectory from engine A, import it
on engine B without a prefill, and it continues token for token as if it had never moved; the
executor's Migrate(kv=True) takes that path, and refuses on engines that cannot move KV."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from dora.exec.engine import GenRequest, SamplingConfig  # noqa: E402
from tests.exec.conftest import _engine_config  # noqa: E402

PROMPT = [60, 61, 62, 63, 64, 65, 66, 67]
TOTAL = 600  # long enough that a request still runs when the test exports it
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def hf_pair(tiny_ckpt):
    """Two hf engines on the same checkpoint (both at version 0)."""
    from dora.exec.engine import make_engine

    a = make_engine(_engine_config("hf", tiny_ckpt))
    b = make_engine(_engine_config("hf", tiny_ckpt))
    yield a, b
    a.close()
    b.close()


def _greedy(rid: str, prompt=PROMPT, total: int = TOTAL, version: int = 0) -> GenRequest:
    return GenRequest(rid, list(prompt), total, version, GREEDY, stop_token_ids=())


class _Fed:
    """Spy on an engine's model: the input_ids shape of every forward call."""

    def __init__(self, model):
        self.calls: list[tuple[int, ...]] = []
        self._h = model.register_forward_pre_hook(
            lambda m, args, kw: self.calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True)

    def remove(self) -> None:
        self._h.remove()


@pytest.mark.parametrize("resident", [None, [5] * 3, [5] * 60], ids=["alone", "shorter-resident", "longer-resident"])
def test_kv_migration_continues_token_for_token(hf_pair, collect, wait_tokens, resident):
    """Greedy: A generates k tokens, exports; B imports and finishes; the whole output equals an
    uninterrupted run on A. B may already run a row of another length (padding merge both ways)."""
    a, b = hf_pair
    v = a.version
    a.submit(_greedy("ref", version=v))
    ref = collect(a, ["ref"])["ref"]
    if resident is not None:
        b.submit(GenRequest("res", resident, 900, v, SamplingConfig(seed=1), stop_token_ids=()))
        wait_tokens(b, "res", 3)
    a.submit(_greedy("mv", version=v))
    wait_tokens(a, "mv", 20)
    state = a.export_kv("mv")
    n = len(state.part.token_ids)
    assert 20 <= n < TOTAL and state.part.token_ids == ref.token_ids[:n]
    assert "mv" not in a.running_ids() and a.export_kv("mv") is None and a.abort("mv") is None
    layers, kv_heads, head_dim = a._kv_shape()
    assert len(state.keys) == len(state.values) == layers
    for t in (*state.keys, *state.values):  # [kv_heads, prompt + generated - 1, head_dim], no padding, CPU
        assert t.device.type == "cpu" and tuple(t.shape) == (kv_heads, len(PROMPT) + n - 1, head_dim)

    b.import_kv(pickle.loads(pickle.dumps(state)))  # as through Ray's object store
    res = collect(b, ["mv"])["mv"]
    assert res.finish_reason == "length" and res.token_ids == ref.token_ids
    assert res.versions == [v] * TOTAL and res.reprefill_tokens == 0
    assert max(abs(x - y) for x, y in zip(res.logprobs, ref.logprobs)) <= 1e-4
    if resident is not None:
        assert b.abort("res").finish_reason == "abort"
    assert not a.poll() and not b.poll()


def test_import_feeds_no_prompt(hf_pair, collect, wait_tokens):
    """B never runs the model on the imported context: every forward after the import feeds one
    token per row, one step per new token, and B records no prefill and no re-prefill."""
    a, b = hf_pair
    v = a.version
    a.submit(GenRequest("np", PROMPT, TOTAL, v, SamplingConfig(seed=3), stop_token_ids=()))
    wait_tokens(a, "np", 30)
    state = a.export_kv("np")
    n = len(state.part.token_ids)
    before = b.get_stats()
    fed = _Fed(b.model)
    try:
        b.import_kv(state)
        res = collect(b, ["np"])["np"]
    finally:
        fed.remove()
    after = b.get_stats()
    assert res.token_ids[:n] == state.part.token_ids and len(res.token_ids) == TOTAL
    assert fed.calls == [(1, 1)] * (TOTAL - n)  # decode steps only: the prompt was not fed again
    assert len(after["prefills"]) == len(before["prefills"])
    assert after["reprefill_tokens"] == before["reprefill_tokens"] and res.reprefill_tokens == 0
    assert sum(s[3] for s in after["steps"][len(before["steps"]):]) == 0  # no step carried prefill tokens


def test_import_refuses_another_version(hf_pair, wait_tokens, reference_model):
    """The KV of version v is valid only under v: an engine with another version loaded refuses it."""
    a, b = hf_pair
    v = a.version
    a.submit(GenRequest("old", PROMPT, TOTAL, v, SamplingConfig(seed=4), stop_token_ids=()))
    wait_tokens(a, "old", 5)
    state = a.export_kv("old")
    b.load_weights(b.version + 1, reference_model.state_dict())
    with pytest.raises(ValueError, match=f"computed by version {v}, this engine has version {v + 1} loaded"):
        b.import_kv(state)
    assert "old" not in b.running_ids()
    a.load_weights(b.version, reference_model.state_dict())  # keep the pair on one version


# ---- the executor's Migrate -----------------------------------------------------------------------------
class _Inline:
    """An engine actor handle whose `.remote` calls the EngineActor method at once, arguments and
    result pickled as Ray would."""

    def __init__(self, engine):
        from dora.exec.engine.actor import EngineActor

        self._actor = EngineActor.__new__(EngineActor)
        self._actor.engine, self._actor.instance = engine, 0

    def __getattr__(self, name):
        fn = getattr(self._actor, name)
        return SimpleNamespace(remote=lambda *a: pickle.loads(pickle.dumps(fn(*pickle.loads(pickle.dumps(a))))))


class _Refusing:
    """An engine handle that fails the test on any call (the migration must not reach it)."""

    def __getattr__(self, name):
        raise AssertionError(f"engine called: {name}")


def _rollout(engines, backend: str, kv_migration: bool):
    """The orchestrator's rollout side with just the state `_migrate` uses."""
    from dora.body import Tracked
    from dora.eventlog import EventLog
    from dora.exec.rollout import Rollout

    r = Rollout()
    r.engines, r.ray, r.dead, r.dying, r.dead_errors = engines, SimpleNamespace(get=lambda x: x), set(), {}, ()
    r.cfg = SimpleNamespace(rollout=SimpleNamespace(backend=backend))
    r.name, r.kv_migration, r.slots, r.log = "dora", kv_migration, 64, EventLog()
    r.delivered = []
    r.deliver = r.delivered.append
    r.now = lambda: 1.0
    r.live = {7: Tracked(7, 3, 0, 0, 0, 0.0)}
    return r


def test_executor_migrates_with_kv(hf_pair, collect, wait_tokens):
    """Migrate(kv=True) on hf engines: export on the source, import on the destination, logged
    `from 0 kv`, no re-prefill; the trajectory finishes on the destination."""
    from dora.sched import actions as A
    from dora.sched import events as E

    a, b = hf_pair
    v = a.version
    a.submit(_greedy("7", version=v))
    wait_tokens(a, "7", 10)
    r = _rollout([_Inline(a), _Inline(b)], "hf", True)
    r._migrate(A.Migrate(7, 1, kv=True), 1.0)
    res = collect(b, ["7"])["7"]
    assert len(res.token_ids) == TOTAL and res.reprefill_tokens == 0
    df = r.log.to_frame()
    rows = df[df["event"].astype(str) == "migrate_in"]
    assert list(rows["detail"]) == ["from 0 kv"] and list(rows["instance"]) == [1]
    assert r.live[7].instance == 1 and r.delivered == [E.MigrationDone(7, 0, 1)]
    assert not a.poll()


def _vllm_moving(engine_pair, collect, wait_tokens, reference_model, rid: str, total: int, k: int):
    """vllm pairs only (hf: skip): both engines on a fresh common version, an unmoved greedy run of
    `total` tokens on A (the reference), then request `rid` on A until it has >= k tokens.
    Returns (A, B, version, reference result)."""
    if engine_pair.backend != "vllm":
        pytest.skip("hf moves KV caches in memory (the hf_pair tests)")
    a, b = engine_pair.a, engine_pair.b
    v = engine_pair.load_both(reference_model.state_dict())
    a.submit(_greedy("ref-" + rid, total=total, version=v))
    ref = collect(a, ["ref-" + rid])["ref-" + rid]
    a.submit(_greedy(rid, total=total, version=v))
    wait_tokens(a, rid, k)
    return a, b, v, ref


def test_executor_migrates_with_kv_on_vllm(engine_pair, collect, wait_tokens, reference_model):
    """The same Migrate(kv=True) on vLLM engines with the connector: the cache moves through the
    store, the trajectory finishes on the destination as if unmoved, nothing re-prefilled."""
    from dora.sched import actions as A
    from dora.sched import events as E

    a, b, _, ref = _vllm_moving(engine_pair, collect, wait_tokens, reference_model, "7", 200, 10)
    r = _rollout([_Inline(a), _Inline(b)], "vllm", True)
    r._migrate(A.Migrate(7, 1, kv=True), 1.0)
    res = collect(b, ["7"])["7"]
    assert res.token_ids == ref.token_ids and res.reprefill_tokens == 0
    df = r.log.to_frame()
    assert list(df[df["event"].astype(str) == "migrate_in"]["detail"]) == ["from 0 kv"]
    assert r.delivered == [E.MigrationDone(7, 0, 1)] and not a.poll()


def test_executor_refuses_kv_migration_on_engines_that_cannot():
    """Migrate(kv=True) on vllm engines (kv_migration False) raises one clear error, before it
    touches an engine: never a silent re-prefill."""
    from dora.sched import actions as A

    r = _rollout([_Refusing(), _Refusing()], "vllm", False)
    with pytest.raises(RuntimeError, match=r"Migrate\(traj=7, kv=True\): the vllm engines cannot move a KV cache.*"
                                           r"policy 'dora' must migrate with kv=False"):
        r._migrate(A.Migrate(7, 1, kv=True), 1.0)
    assert r.live[7].instance == 0 and len(r.log) == 0 and r.delivered == []


def test_engines_report_kv_migration():
    from dora.exec.engine.hf_engine import HfEngine
    from dora.exec.engine.vllm_engine import VllmEngine

    # vLLM: only an engine given a KV store (EngineConfig.kv_store) moves KV caches
    assert HfEngine.kv_migration is True and VllmEngine.kv_migration is False


@pytest.mark.parametrize("k", [20, 150])
def test_vllm_kv_migration_through_the_connector(engine_pair, collect, wait_tokens, reference_model, k):
    """vLLM (DoraKVConnector through kv_transfer_config): A generates >= k greedy tokens, export_kv
    aborts it with its KV cache saved to the shared store; B imports it, loads that cache instead
    of prefilling (vLLM reports all but the last token as cached, else the request fails) and
    finishes token for token as an unmoved run, logprobs equal; nothing is re-prefilled and the
    store is left empty."""
    import os

    a, b, v, ref = _vllm_moving(engine_pair, collect, wait_tokens, reference_model, "mv", 300, k)
    assert a.kv_migration and b.kv_migration
    reprefill = b.get_stats()["reprefill_tokens"]
    state = a.export_kv("mv")
    n = len(state.part.token_ids)
    assert k <= n < 300 and state.part.token_ids == ref.token_ids[:n]
    # the cache covers prompt + generated - 1 tokens (the last sampled one not yet fed), or more when the
    # source had fed it and sampled further (outputs the client had not received) before the abort
    assert state.keys is None and state.handle is not None and state.handle[1] >= len(PROMPT) + n - 1
    assert "mv" not in a.running_ids() and a.export_kv("mv") is None

    b.import_kv(pickle.loads(pickle.dumps(state)))  # as through Ray's object store
    res = collect(b, ["mv"])["mv"]
    assert res.finish_reason == "length" and res.token_ids == ref.token_ids
    assert res.versions == [v] * 300 and res.reprefill_tokens == 0
    assert b.get_stats()["reprefill_tokens"] == reprefill
    assert max(abs(x - y) for x, y in zip(res.logprobs, ref.logprobs)) <= 1e-4
    assert os.listdir(a.cfg.kv_store) == [] and not a.poll() and not b.poll()


def test_vllm_kv_migration_uses_the_moved_cache(engine_pair, collect, wait_tokens, reference_model):
    """Control: the same move with the saved cache scaled by 3 before B loads it. B's logprobs then
    leave the unmoved run's, so B decodes from the moved cache (a recomputed one would agree)."""
    import os

    a, b, _, ref = _vllm_moving(engine_pair, collect, wait_tokens, reference_model, "bad", 120, 20)
    state = a.export_kv("bad")
    n = len(state.part.token_ids)
    path = os.path.join(a.cfg.kv_store, state.handle[0], "kv.pt")
    torch.save({name: t * 3 for name, t in torch.load(path).items()}, path)
    b.import_kv(state)
    res = collect(b, ["bad"])["bad"]
    assert res.token_ids[:n] == ref.token_ids[:n]
    assert max(abs(x - y) for x, y in zip(res.logprobs[n:], ref.logprobs[n:])) > 0.05


def test_vllm_import_refuses_a_cache_it_cannot_find(engine_pair, tmp_path):
    """A KVState whose saved cache is not in this engine's store (another host, or already
    consumed): import_kv raises in one line, never a silent re-prefill."""
    from dora.exec.engine import GenResult, KVState

    if engine_pair.backend != "vllm":
        pytest.skip("vllm only")
    b = engine_pair.b
    part = GenResult("gone", list(PROMPT), [5, 6, 7], [0.0] * 3, [b.version] * 3, "abort", b.version)
    state = KVState(part, 50, GREEDY, (), None, None, None, handle=("gone#0", len(PROMPT) + 2))
    with pytest.raises(RuntimeError, match=r"import_kv 'gone': no KV cache under 'gone#0'.*share the store directory"):
        b.import_kv(state)
    assert "gone" not in b.running_ids()


def test_laminar_repack_kv_on_vllm_is_refused_before_a_run():
    """laminar's repack with the KV (policy.laminar.repack_kv) on vLLM engines: refused when the
    configuration is read, in one line that says how to fix it; accepted on the hf backend."""
    from dora.config import build
    from dora.errors import InputError
    from dora.exec.run_config import ExecConfig

    base = {"model": "m", "policies": ["laminar"], "policy": {"laminar": {"repack_kv": True}}}
    with pytest.raises(InputError, match=r"repack_kv: the vllm backend cannot move a KV cache without "
                                         r"rollout.kv_connector.*set it to false"):
        build(ExecConfig, {**base, "rollout": {"backend": "vllm"}})
    assert build(ExecConfig, {**base, "rollout": {"backend": "hf"}}).policy.laminar.repack_kv
    assert build(ExecConfig, {**base, "rollout": {"backend": "vllm", "kv_connector": True}}).policy.laminar.repack_kv
    with pytest.raises(InputError, match=r"kv_connector: the hf backend moves KV caches without one"):
        build(ExecConfig, {**base, "rollout": {"backend": "hf", "kv_connector": True}})
