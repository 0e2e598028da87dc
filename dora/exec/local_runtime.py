"""A stand-in for the few Ray calls the orchestrator makes, running every actor in this process.

For machines without Ray (the executor's `runtime: local`): each actor gets its own worker
thread (calls to one actor run in order, as on a Ray actor with one thread), `.remote()`
returns a Future, and `get`/`wait`/`put`/`kill` behave as Ray's do for them. The engines
already run their generation in threads of their own; the trainer runs in its actor thread.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from typing import Any


class _Method:
    def __init__(self, pool: cf.ThreadPoolExecutor, fn):
        self._pool, self._fn = pool, fn

    def remote(self, *args: Any, **kwargs: Any) -> cf.Future:
        def run() -> Any:  # Futures among the arguments are resolved first, as Ray does with ObjectRefs
            a = [x.result() if isinstance(x, cf.Future) else x for x in args]
            kw = {k: v.result() if isinstance(v, cf.Future) else v for k, v in kwargs.items()}
            return self._fn(*a, **kw)

        return self._pool.submit(run)


class LocalActor:
    """`LocalActor(cls, *args)`: builds `cls(*args)` in its own thread; methods have `.remote`."""

    def __init__(self, cls, *args: Any, threads: int = 1, **kwargs: Any):
        self._pool = cf.ThreadPoolExecutor(max_workers=threads)
        self._obj = self._pool.submit(cls, *args, **kwargs)

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        obj = self._obj

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(obj.result(), name)(*args, **kwargs)

        return _Method(self._pool, call)

    def wait_built(self) -> "LocalActor":
        self._obj.result()
        return self

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


class LocalRuntime:
    """get / wait / put / kill over Futures, with Ray's signatures."""

    @staticmethod
    def get(refs):
        if isinstance(refs, list):
            return [r.result() if isinstance(r, cf.Future) else r for r in refs]
        return refs.result() if isinstance(refs, cf.Future) else refs

    @staticmethod
    def wait(refs: list, num_returns: int = 1, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [r for r in refs if not isinstance(r, cf.Future) or r.done()]
            if len(done) >= num_returns or (deadline is not None and time.monotonic() >= deadline):
                return done, [r for r in refs if r not in done]
            time.sleep(0.001)

    @staticmethod
    def put(value):
        return value

    @staticmethod
    def kill(actor: LocalActor) -> None:
        actor.shutdown()
