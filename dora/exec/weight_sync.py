"""Weight sync over collectives (`rollout.weight_sync=collective`).

A process group of the trainer (rank 0) and the live rollout engines (ranks 1..n) is made from a
TCPStore served by the trainer's process and a PrefixStore per group generation, with
`ProcessGroupGloo` (CPU tensors) or `ProcessGroupNCCL` (CUDA tensors) built on it directly: no
process's default torch.distributed group is created or touched (the trainer may have its own
for its ranks; vLLM's worker has one). The orchestrator numbers the generations; a new member
set (an engine died or came back) or a new trainer process means a new generation.

A version crosses as: a header (JSON: version, per-tensor name/dtype/shape/bucket/offset, the
buckets' dtypes and sizes) broadcast as its length then its bytes, then the buckets (flat
buffers of whole tensors of one dtype, up to BUCKET_BYTES each, sent as bytes): 2 + #buckets
collectives whatever the tensor count. The receiver's tensors are views into its buckets.
Buckets rather than one buffer per dtype: a buffer of the whole model is a fresh allocation per
version on each receiver (its pages faulted in as the broadcast writes them), which made it 2x
slower than one broadcast per tensor on a 274 MB model (benchmarks/weight_sync.py).

    spec = group_spec(address, generation=1, world_size=3, timeout_s=60)
    trainer:  WeightSender.broadcast(spec, version, weights_fn)   # rank 0
    engine:   WeightStage.receive(spec, rank, keep_from)           # ranks 1..n, concurrently
"""

from __future__ import annotations

import datetime
import json
import math
import socket
import threading
import time
from typing import Any, Callable

from dora.errors import InputError

CONNECT_TIMEOUT_S = 30.0  # reaching the trainer's store, which is up before any spec names it
BUILD_TIMEOUT_S = 30.0  # gloo: building a group whose members have all arrived
ARRIVE_POLL_S = 0.01


def _key(spec: dict) -> tuple[str, int, int]:
    return spec["host"], spec["port"], spec["generation"]


def group_spec(address: dict, generation: int, world_size: int, timeout_s: float) -> dict:
    """What every member needs to join one group: the trainer's store, a generation, the size."""
    return {"host": str(address["host"]), "port": int(address["port"]), "backend": str(address["backend"]),
            "generation": int(generation), "world_size": int(world_size), "timeout_s": float(timeout_s)}


def local_ip_towards(host: str, port: int) -> str:
    """This machine's address on the interface that reaches host:port (no packet is sent)."""
    if host in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])


def node_ip() -> str:
    """The address other nodes reach this process at: Ray's node address, else loopback."""
    try:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())
    except ImportError:
        pass
    return "127.0.0.1"


def make_group(spec: dict, rank: int, store: Any = None) -> Any:
    """This process's member of the group `spec` describes (rank 0 passes its master store). Over gloo
    the build, which starts once every member has arrived, waits at most BUILD_TIMEOUT_S for the
    others: a member that died between arriving and building fails it then, not after the spec's
    transfer timeout (the driver's `abort_group` no longer reaches members past arrival)."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=spec["timeout_s"])
    prefixed = _generation_store(spec, store)
    size = spec["world_size"]
    _arrive(prefixed, size, spec["timeout_s"])
    if spec["backend"] == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(prefixed, rank, size, opts)
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = min(timeout, datetime.timedelta(seconds=BUILD_TIMEOUT_S))
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=local_ip_towards(spec["host"], spec["port"]))]
    pg = dist.ProcessGroupGloo(prefixed, rank, size, opts)
    pg.set_timeout(timeout)  # the transfers: the spec's timeout
    return pg



def _arrive(store: Any, size: int, timeout_s: float) -> None:
    """Wait until all `size` members of a generation have arrived at its store, or the driver has
    aborted it (`abort_group`: a member died before arriving), before the process group is built
    (building it would wait for a dead member until the timeout)."""
    store.add("arrived", 1)
    deadline = time.monotonic() + timeout_s
    while store.add("arrived", 0) < size:
        if store.check(["abort"]):
            raise RuntimeError("weight sync: this group generation was aborted (a member died before joining)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"weight sync: {size - store.add('arrived', 0)} of {size} members did not join "
                               f"within {timeout_s:.0f} s")
        time.sleep(ARRIVE_POLL_S)


def abort_group(spec: dict) -> None:
    """Abort the generation `spec` describes: members still waiting for the others to arrive
    raise at once (a member that died before arriving would hold them until the timeout)."""
    _generation_store(spec, timeout_s=CONNECT_TIMEOUT_S).set("abort", "1")



def _generation_store(spec: dict, store: Any = None, timeout_s: float | None = None) -> Any:
    """The keys of `spec`'s generation on the trainer's store (`store`: rank 0's master store;
    else a client connection, waiting up to `timeout_s`, default the spec's). The store is up
    before any spec names it, so reaching it is given at most CONNECT_TIMEOUT_S: a store that
    cannot be reached is a dead trainer's, and waiting the spec's timeout for it would hold this
    member (and a vLLM engine's generation) for nothing."""
    import torch.distributed as dist

    if store is None:
        timeout = datetime.timedelta(seconds=spec["timeout_s"] if timeout_s is None else timeout_s)
        connect = datetime.timedelta(seconds=min(CONNECT_TIMEOUT_S, timeout.total_seconds()))
        try:
            store = dist.TCPStore(spec["host"], spec["port"], is_master=False, timeout=connect)
        except Exception as e:  # noqa: BLE001 - DistNetworkError / TimeoutError / RuntimeError by torch version
            raise RuntimeError(f"weight sync: the trainer's store at {spec['host']}:{spec['port']} cannot be "
                               f"reached within {connect.total_seconds():.0f} s (the trainer died?): "
                               f"{type(e).__name__}") from e
        store.set_timeout(timeout)
    return dist.PrefixStore(f"dora-wsync/{spec['generation']}/", store)


def _bcast(pg: Any, t: Any) -> None:
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([t], opts).wait()


# a bucket holds whole tensors of one dtype up to this (a larger tensor goes alone): on a 274 MB
# model over gloo (2 receivers, loopback) 4 MiB buckets matched one broadcast per tensor, 16-32 MiB
# ones were 1.5-1.7x slower, one buffer per dtype 2x; a small model (26 tensors, 0.39 MB) is one
# bucket, 2.8-3.6x faster than a broadcast per tensor
BUCKET_BYTES = 4 * 2 ** 20


class Packed:
    """A version's tensors as flat buffers ("buckets": whole tensors of one dtype, up to
    `bucket_bytes` each), with the header that describes them."""

    def __init__(self, version: int, items: list[tuple[str, Any]], bucket_bytes: int = BUCKET_BYTES):
        import torch

        self.version = version
        self.meta: list[tuple[str, str, list[int], int, int]] = []  # name, dtype, shape, bucket, element offset
        parts: list[list[Any]] = []
        self.buckets: list[tuple[str, int]] = []  # dtype, elements
        open_: dict[str, int] = {}  # dtype -> its bucket still filling
        for name, t in items:
            if not isinstance(t, torch.Tensor):
                raise InputError(f"weights: {name!r} is a {type(t).__name__}, not a torch.Tensor")
            dt = str(t.dtype).removeprefix("torch.")
            b = open_.get(dt)
            if b is None or (self.buckets[b][1] + t.numel()) * t.element_size() > bucket_bytes:
                b = open_[dt] = len(self.buckets)
                self.buckets.append((dt, 0))
                parts.append([])
            self.meta.append((name, dt, list(t.shape), b, self.buckets[b][1]))
            self.buckets[b] = (dt, self.buckets[b][1] + t.numel())
            parts[b].append(t.detach().reshape(-1))
        self.buffers = [torch.cat(ts) for ts in parts]
        self.nbytes = sum(x.numel() * x.element_size() for x in self.buffers)

    def header(self) -> bytes:
        return json.dumps({"version": self.version, "tensors": self.meta, "buckets": self.buckets}).encode()


def _views(meta: list, buffers: list[Any]) -> list[tuple[str, Any]]:
    out = []
    for name, _, shape, b, off in meta:
        n = math.prod(shape)
        out.append((name, buffers[b][off:off + n].view(shape)))
    return out


def send(pg: Any, packed: Packed, device: Any) -> int:
    """Rank 0: broadcast `packed` (header, then each bucket). Returns the bytes sent once."""
    import torch

    _send_header(pg, packed.header(), device)
    for buf in packed.buffers:
        if buf.numel():
            _bcast(pg, buf.to(device).view(torch.uint8))
    return packed.nbytes


def receive(pg: Any, device: Any) -> tuple[int, list[tuple[str, Any]], int]:
    """Ranks 1..n: (version, (name, tensor) views into fresh buckets on `device`, bytes)."""
    import torch

    n = torch.zeros(1, dtype=torch.int64, device=device)
    _bcast(pg, n)
    raw = torch.empty(int(n.item()), dtype=torch.uint8, device=device)
    _bcast(pg, raw)
    head = json.loads(bytes(raw.cpu().numpy().tobytes()))
    if "missing" in head:
        raise RuntimeError(f"weight sync: the trainer cannot send version {head['version']}: {head['missing']}")
    buffers, nbytes = [], 0
    for dt, count in head["buckets"]:
        buf = torch.empty(count, dtype=getattr(torch, dt), device=device)
        if count:
            _bcast(pg, buf.view(torch.uint8))
        buffers.append(buf)
        nbytes += buf.numel() * buf.element_size()
    return int(head["version"]), _views(head["tensors"], buffers), nbytes


def send_missing(pg: Any, version: int, why: str, device: Any) -> None:
    """Rank 0 cannot send `version`: a header that makes every receiver fail with `why`."""
    _send_header(pg, json.dumps({"version": version, "missing": why}).encode(), device)


def _send_header(pg: Any, head: bytes, device: Any) -> None:
    """Rank 0: a JSON header as its length, then its bytes (`receive` reads both)."""
    import torch

    _bcast(pg, torch.tensor([len(head)], dtype=torch.int64, device=device))
    _bcast(pg, torch.frombuffer(bytearray(head), dtype=torch.uint8).to(device))


class WeightSender:
    """The trainer's side: the master store, the current group, the newest version packed."""

    def __init__(self, backend: str = "auto", device: str = "cpu", bucket_bytes: int = BUCKET_BYTES):
        if backend == "auto":
            backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend not in ("gloo", "nccl"):
            raise InputError(f"rollout.weight_sync_backend: {backend!r} is not one of 'auto', 'gloo', 'nccl'")
        self.backend = backend
        self.bucket_bytes = bucket_bytes
        self.device = device if backend == "nccl" else "cpu"
        self._store: Any = None
        self._group: tuple[tuple[str, int, int], Any] | None = None
        self._packed: Packed | None = None

    def address(self) -> dict:
        """host, port and backend of this process's store (started on first use, on a free port)."""
        import torch.distributed as dist

        if self._store is None:
            self._store = dist.TCPStore("0.0.0.0", 0, is_master=True, wait_for_workers=False,
                                        timeout=datetime.timedelta(seconds=600))
        return {"host": node_ip(), "port": int(self._store.port), "backend": self.backend}

    def close(self) -> None:
        """Drop the group and the store (their sockets close: members waiting on them fail, as
        they would were this process gone)."""
        self._group = None
        self._store = None
        self._packed = None

    def broadcast(self, spec: dict, version: int, current: int, weights: Callable[[], list]) -> dict:
        """Send `version` to the group `spec` (joining it first when its generation is new).
        `current`: the trainer's version; `weights()`: its (name, tensor) pairs, packed once per
        version. Returns {version, bytes, seconds}."""
        t0 = time.perf_counter()
        self.address()
        if self._group is None or self._group[0] != _key(spec):
            self._group = None  # drop the old group before the new one is made
            self._group = (_key(spec), make_group(spec, 0, self._store))
        pg = self._group[1]
        if self._packed is None or self._packed.version != version:
            if current != version:
                have = "none" if self._packed is None else f"v{self._packed.version}"
                why = f"this trainer holds v{current} (packed: {have})"
                send_missing(pg, version, why, self.device)
                raise RuntimeError(f"weight sync: cannot send version {version}: {why}")
            self._packed = None
            try:
                self._packed = Packed(version, list(weights()), self.bucket_bytes)
            except Exception as e:  # e.g. a peer trainer rank died during the gather: free the receivers
                send_missing(pg, version, f"the trainer failed to gather it ({type(e).__name__})", self.device)
                raise
        nbytes = send(pg, self._packed, self.device)
        return {"version": version, "bytes": nbytes, "seconds": time.perf_counter() - t0}


class WeightStage:
    """An engine's side: its group membership and the versions received but not yet loaded.

    Receives run one at a time (their own lock): the trainer serves its groups in the order the
    orchestrator asked, and so does every engine. A load reads the stage while a receive runs."""

    def __init__(self) -> None:
        self._recv = threading.Lock()
        self._lock = threading.Lock()
        self._staged: dict[int, list[tuple[str, Any]]] = {}
        self._group: tuple[tuple[str, int, int], Any] | None = None
        self.loaded = -1  # the newest version loaded from the stage

    def receive(self, spec: dict, rank: int, keep_from: int, device: Any = "cpu") -> dict:
        """Join `spec`'s group as `rank` (if new), receive a version and stage it; drop staged
        versions older than `keep_from` or not newer than the loaded one. {version, bytes, seconds}."""
        t0 = time.perf_counter()
        with self._recv:
            if self._group is None or self._group[0] != _key(spec):
                self._group = None
                self._group = (_key(spec), make_group(spec, rank))
            try:
                version, items, nbytes = receive(self._group[1], device)
            except BaseException:
                self._group = None  # a failed collective leaves the group unusable
                raise
        with self._lock:
            self._staged[version] = items
            for v in [v for v in self._staged if v < keep_from or v <= self.loaded]:
                del self._staged[v]
        return {"version": version, "bytes": nbytes, "seconds": time.perf_counter() - t0}

    def get(self, version: int) -> list[tuple[str, Any]]:
        """The staged tensors of `version` (kept until a newer version is loaded)."""
        with self._lock:
            items = self._staged.get(version)
            if items is None:
                raise RuntimeError(f"weight sync: version {version} is not staged here (staged: "
                                   f"{sorted(self._staged)}); the trainer's broadcast of it did not reach this engine")
            return items

    def loaded_version(self, version: int) -> None:
        """`version` is loaded: it and older staged versions can never be loaded again."""
        with self._lock:
            self.loaded = max(self.loaded, version)
            for v in [v for v in self._staged if v <= version]:
                del self._staged[v]

    def versions(self) -> list[int]:
        with self._lock:
            return sorted(self._staged)
