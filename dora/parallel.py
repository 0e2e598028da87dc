"""Run independent simulations in parallel: here, on local processes, or on a Ray cluster.

`run_tasks(fn, tasks)` calls `fn(*task)` for every task and yields `(index, result)` as each
finishes, with a progress bar (tqdm, on stderr) unless quiet. `fn` must be a module-level
function (it is pickled to the workers). With `ray_address` the tasks run as Ray tasks on that
cluster (`ray.init(address=...)`: "auto" for a cluster this machine belongs to, "local" to start
one here, or `ray://host:port`); every worker needs this package installed. Ray is imported
only then (it is the executor's engine, not a core dependency).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator, Sequence

from dora.errors import InputError, too_small


def check_jobs(jobs: int | None) -> int:
    """--jobs: None is the CPU count; refuse < 1."""
    n = jobs if jobs is not None else (os.cpu_count() or 1)
    if n < 1:
        raise too_small("--jobs", n, 1, "process")
    return n


def run_tasks(fn: Callable[..., Any], tasks: Sequence[tuple], jobs: int = 1, ray_address: str | None = None,
              desc: str = "runs", quiet: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield (task index, fn(*task)) in completion order."""
    from tqdm import tqdm

    bar = tqdm(total=len(tasks), desc=desc, unit="run", file=sys.stderr, disable=quiet, dynamic_ncols=True)
    try:
        if ray_address:
            yield from _on_ray(fn, tasks, ray_address, bar)
        elif jobs <= 1 or len(tasks) <= 1:
            for k, t in enumerate(tasks):
                res = fn(*t)
                bar.update()
                yield k, res
        else:
            with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
                futs = {pool.submit(fn, *t): k for k, t in enumerate(tasks)}
                for f in as_completed(futs):
                    res = f.result()
                    bar.update()
                    yield futs[f], res
    finally:
        bar.close()


def _on_ray(fn: Callable[..., Any], tasks: Sequence[tuple], address: str, bar: Any) -> Iterator[tuple[int, Any]]:
    try:
        import ray
    except ImportError:
        raise InputError(f"--ray-address {address}: Ray is not installed; install the executor extra "
                         "(pip install -e '.[exec-cpu]') or drop --ray-address to run on local processes") from None
    started = not ray.is_initialized()
    if started and address not in ("auto", "local"):
        _probe(address)  # ray.init retries an address with nothing behind it for minutes
    if started:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            msg = " ".join(str(e).split())[:200]
            raise InputError(f"--ray-address {address}: cannot connect to a Ray cluster there ({msg}); start one "
                             "with `ray start --head` or pass 'local'") from None
    try:
        remote = ray.remote(fn)
        refs = {remote.remote(*t): k for k, t in enumerate(tasks)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for r in ready:
                bar.update()
                yield refs[r], ray.get(r)
    finally:
        if started:
            ray.shutdown()


def _probe(address: str, timeout_s: float = 3.0) -> None:
    """A TCP connection to the cluster's head (`host:port` or `ray://host:port`) opens within
    `timeout_s`; else one line."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray-address {address}: not an address; give host:port, ray://host:port, 'auto' or 'local'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise InputError(f"--ray-address {address}: cannot connect to a Ray cluster there ({type(e).__name__}); start "
                         "one with `ray start --head` or pass 'local'") from None
