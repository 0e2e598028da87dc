"""Collective weight sync (dora/exec/weight_sync.py): the group itself, across processes, and
staged versions on an engine (a staged version changes nothing until it is loaded)."""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest

torch = pytest.importorskip("torch")

from dora.exec.weight_sync import WeightSender, WeightStage, group_spec  # noqa: E402


def _items():
    g = torch.Generator().manual_seed(0)
    return [("a.weight", torch.randn(5, 7, generator=g)),
            ("b.bias", torch.randn(3, generator=g).to(torch.bfloat16)),
            ("empty", torch.empty(0, 4)),
            ("c.scalar", torch.tensor(2.5, dtype=torch.float64)),
            ("d.weight", torch.randn(2, 3, generator=g)),
            ("e.idx", torch.arange(4, dtype=torch.int64))]


def _receiver(spec, rank, q):
    stage = WeightStage()
    try:
        info = stage.receive(spec, rank, keep_from=0)
        items = stage.get(info["version"])
        q.put((rank, info, [(n, str(t.dtype), list(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()
                             if t.numel() else b"") for n, t in items]))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        q.put((rank, None, repr(e)))


def test_broadcast_to_two_processes_is_bit_identical():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    sender = WeightSender("gloo")
    spec = group_spec(sender.address(), generation=1, world_size=3, timeout_s=60)
    procs = [ctx.Process(target=_receiver, args=(spec, r, q)) for r in (1, 2)]
    for p in procs:
        p.start()
    items = _items()
    out = sender.broadcast(spec, 7, 7, lambda: items)
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    want = [(n, str(t.dtype), list(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            for n, t in items]
    nbytes = sum(t.numel() * t.element_size() for _, t in items)
    assert out["bytes"] == nbytes and out["version"] == 7
    for rank, info, recv in sorted(got, key=lambda x: x[0]):
        assert info is not None, recv
        assert info == {**info, "version": 7, "bytes": nbytes}
        assert recv == want


def test_stage_keeps_the_versions_still_loadable_and_reuses_the_group():
    sender = WeightSender("gloo")
    stages = [WeightStage(), WeightStage()]
    spec = group_spec(sender.address(), generation=1, world_size=3, timeout_s=60)

    def send(version, spec, keep_from):
        items = [("w", torch.full((4,), float(version)))]
        res = {}
        ts = [threading.Thread(target=lambda r=r: res.__setitem__(r, stages[r - 1].receive(spec, r, keep_from)))
              for r in (1, 2)]
        for t in ts:
            t.start()
        sender.broadcast(spec, version, version, lambda: items)
        for t in ts:
            t.join(60)
        return res

    for v in (1, 2, 3):
        send(v, spec, keep_from=v - 1)
    assert stages[0].versions() == [2, 3] and stages[1].versions() == [2, 3]
    group = stages[0]._group
    send(4, spec, keep_from=2)
    assert stages[0]._group is group  # same generation: no new rendezvous
    assert torch.equal(stages[1].get(4)[0][1], torch.full((4,), 4.0))
    stages[0].loaded_version(3)
    assert stages[0].versions() == [4]
    with pytest.raises(RuntimeError, match="version 3 is not staged"):
        stages[0].get(3)
    # a new generation (another member set): a fresh group on the same store
    spec2 = group_spec(sender.address(), generation=2, world_size=3, timeout_s=60)
    send(5, spec2, keep_from=3)
    assert stages[0]._group is not group and stages[0].versions() == [4, 5]


def _receive_in_thread(stage, spec, rank: int = 1):
    """Start `stage.receive(spec, rank)` in a thread; its RuntimeError's text lands in err['e']."""
    err: dict = {}

    def recv():
        try:
            stage.receive(spec, rank, 0)
        except RuntimeError as e:
            err["e"] = str(e)

    t = threading.Thread(target=recv)
    t.start()
    return t, err


def test_a_version_the_trainer_no_longer_holds_fails_on_every_member():
    sender = WeightSender("gloo")
    stage = WeightStage()
    spec = group_spec(sender.address(), generation=1, world_size=2, timeout_s=60)
    t, err = _receive_in_thread(stage, spec)
    with pytest.raises(RuntimeError, match="cannot send version 3"):
        sender.broadcast(spec, 3, 4, lambda: [("w", torch.zeros(2))])
    t.join(60)
    assert "cannot send version 3" in err["e"] and stage.versions() == []


def test_a_generation_aborted_for_a_dead_member_frees_the_others_at_once():
    """World of 3 (trainer + 2 engines) where engine 2 never arrives (it died before joining): the
    driver's abort_group makes the trainer and engine 1 raise at once instead of waiting for the
    60 s timeout; the next generation without the dead member then works."""
    import time

    from dora.exec.weight_sync import abort_group

    sender, stage = WeightSender("gloo"), WeightStage()
    spec = group_spec(sender.address(), generation=1, world_size=3, timeout_s=60)
    t, err = _receive_in_thread(stage, spec)
    threading.Timer(0.5, abort_group, args=(spec,)).start()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="aborted"):
        sender.broadcast(spec, 1, 1, lambda: [("w", torch.ones(2))])
    t.join(60)
    assert time.monotonic() - t0 < 30 and "aborted" in err["e"]
    spec2 = group_spec(sender.address(), generation=2, world_size=2, timeout_s=60)
    t = threading.Thread(target=lambda: stage.receive(spec2, 1, 0))
    t.start()
    sender.broadcast(spec2, 1, 1, lambda: [("w", torch.ones(2))])
    t.join(60)
    assert stage.versions() == [1]


def test_a_member_dead_after_arriving_fails_the_build_after_build_timeout(monkeypatch):
    """World of 3 where engine 2 arrives and dies before building the group (the driver's abort no
    longer reaches members past arrival): the trainer and engine 1 fail after BUILD_TIMEOUT_S, not
    after the spec's 60 s; the group then carries a transfer slower than BUILD_TIMEOUT_S."""
    import time

    import dora.exec.weight_sync as ws

    monkeypatch.setattr(ws, "BUILD_TIMEOUT_S", 1.0)
    sender, stage = WeightSender("gloo"), WeightStage()
    spec = ws.group_spec(sender.address(), generation=1, world_size=3, timeout_s=60)
    ghost = threading.Thread(target=ws._arrive, args=(ws._generation_store(spec), 3, 60))
    ghost.start()
    t, err = _receive_in_thread(stage, spec)
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - torch's store/gloo error type varies by version
        sender.broadcast(spec, 1, 1, lambda: [("w", torch.ones(2))])
    t.join(60)
    ghost.join(60)
    assert time.monotonic() - t0 < 30 and err["e"] and stage.versions() == []
    spec2 = ws.group_spec(sender.address(), generation=2, world_size=2, timeout_s=60)
    t = threading.Thread(target=lambda: stage.receive(spec2, 1, 0))
    t.start()
    slow = [("w", torch.ones(2))]
    sender.broadcast(spec2, 1, 1, lambda: (time.sleep(2.5), slow)[1])  # the weights come later than 1 s
    t.join(60)
    assert stage.versions() == [1]


def test_a_member_gives_up_on_a_store_that_is_gone(monkeypatch):
    """A dead trainer's store cannot be reached: a member trying to join its generation fails after
    CONNECT_TIMEOUT_S, not after the spec's transfer timeout (600 s here)."""
    import socket
    import time

    import dora.exec.weight_sync as ws

    monkeypatch.setattr(ws, "CONNECT_TIMEOUT_S", 1.0)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    spec = ws.group_spec({"host": "127.0.0.1", "port": port, "backend": "gloo"}, 1, 2, 600.0)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"store at 127.0.0.1:\d+ cannot be reached within 1 s"):
        ws.make_group(spec, 1)
    assert time.monotonic() - t0 < 120  # torch retries the connection a few times; never the 600 s


@pytest.mark.parametrize("override, needle", [
    ({"weight_sync": "nccl"}, "weight_sync: 'nccl' is not one of 'collective', 'tensors', 'checkpoint'"),
    ({"weight_sync_backend": "mpi"}, "weight_sync_backend: 'mpi' is not one of"),
    ({"weight_sync_timeout_s": 0}, "weight_sync_timeout_s"),
])
def test_bad_weight_sync_settings_are_one_line_input_errors(tmp_path, override, needle):
    from dora.config import build
    from dora.errors import InputError
    from dora.exec.run_config import ExecConfig

    with pytest.raises(InputError) as e:
        build(ExecConfig, {"model": str(tmp_path), "rollout": override})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_the_local_runtime_syncs_over_gloo(tmp_path):
    """One process holds the trainer and the engines: NCCL cannot make them members of one group on
    one device (a run on one H200 died at its first broadcast), so auto is gloo there, nccl refused."""
    from dora.config import build
    from dora.errors import InputError
    from dora.exec.collective import sync_backend
    from dora.exec.run_config import ExecConfig

    assert sync_backend(build(ExecConfig, {"model": str(tmp_path), "runtime": "local"})) == "gloo"
    assert sync_backend(build(ExecConfig, {"model": str(tmp_path)})) == "auto"  # the trainer picks, on Ray
    with pytest.raises(InputError, match="nccl needs one device per member.*set it to gloo or auto, or drop --local"):
        build(ExecConfig, {"model": str(tmp_path), "runtime": "local", "rollout": {"weight_sync_backend": "nccl"}})
    build(ExecConfig, {"model": str(tmp_path), "runtime": "local",  # nccl is not used by tensors sync
                       "rollout": {"weight_sync_backend": "nccl", "weight_sync": "tensors"}})


def test_injected_load_failures_need_tensors_or_collective(tmp_path):
    from dora.config import build
    from dora.errors import InputError
    from dora.exec.run_config import ExecConfig

    cfg = {"model": str(tmp_path), "faults": {"load_fail_at": [[0, 1]]}}
    build(ExecConfig, cfg).validate()  # collective, the default
    with pytest.raises(InputError, match="need rollout.weight_sync=tensors or collective"):
        build(ExecConfig, {**cfg, "rollout": {"weight_sync": "checkpoint"}}).validate()
