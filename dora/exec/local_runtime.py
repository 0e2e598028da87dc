"""A stand-in for the few Ray calls the orchestrator makes, running every actor in this process.

For machines without Ray (the executor's `runtime: local`): each actor gets its own worker
thread (calls to one actor run in order, as on a Ray actor with one thread), `.remote()`
returns a Future, and `get`/`wait`/`put`/`kill` behave as Ray's do for them. The engines
already run their generation in threads of their own; the trainer runs in its actor thread.

`kill(actor)` makes the actor dead as Ray's does: its calls still pending and every later one
fail with ActorDiedError (Ray: RayActorError), and the object's `close()` (if any) runs, so an
engine stops generating. A call already running on the actor's thread cannot be stopped; its
result is dropped, but what it writes still lands (a checkpoint save: a replacement trainer's
resume reads a checkpoint replaced under it again).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import Any


class ActorDiedError(RuntimeError):
    """A call on a killed local actor (Ray raises RayActorError)."""


class _Method:
    def __init__(self, actor: "LocalActor", fn):
        self._actor, self._fn = actor, fn

    def remote(self, *args: Any, **kwargs: Any) -> cf.Future:
        actor = self._actor
        out: cf.Future = cf.Future()
        out.set_running_or_notify_cancel()
        if actor._dead:
            out.set_exception(ActorDiedError(f"actor {actor._name} was killed"))
            return out

        def run() -> None:  # Futures among the arguments are resolved first, as Ray does with ObjectRefs
            try:
                a = [x.result() if isinstance(x, cf.Future) else x for x in args]
                kw = {k: v.result() if isinstance(v, cf.Future) else v for k, v in kwargs.items()}
                res, err = self._fn(*a, **kw), None
            except BaseException as e:  # noqa: BLE001 - handed to the caller, as Ray does
                res, err = None, e
            with actor._guard:
                actor._pending.discard(out)
                if out.done():
                    return  # the actor was killed meanwhile: the caller already got ActorDiedError
                if err is not None:
                    out.set_exception(err)
                else:
                    out.set_result(res)

        with actor._guard:
            actor._pending.add(out)
        actor._pool.submit(run)
        return out


class LocalActor:
    """`LocalActor(cls, *args)`: builds `cls(*args)` in its own thread; methods have `.remote`."""

    def __init__(self, cls, *args: Any, threads: int = 1, **kwargs: Any):
        self._pool = cf.ThreadPoolExecutor(max_workers=threads)
        self._obj = self._pool.submit(cls, *args, **kwargs)
        self._name = cls.__name__
        self._dead = False
        self._guard = threading.Lock()
        self._pending: set[cf.Future] = set()

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        obj = self._obj

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(obj.result(), name)(*args, **kwargs)

        return _Method(self, call)

    def wait_built(self) -> "LocalActor":
        self._obj.result()
        return self

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    def die(self) -> None:
        """Killed: pending and later calls fail with ActorDiedError; the object is closed."""
        with self._guard:
            if self._dead:
                return
            self._dead = True
            pending, self._pending = list(self._pending), set()
            for f in pending:
                if not f.done():
                    f.set_exception(ActorDiedError(f"actor {self._name} was killed"))
        self._pool.shutdown(wait=False, cancel_futures=True)

        def close() -> None:
            try:
                close_fn = getattr(self._obj.result(), "close", None)
                if close_fn is not None:
                    close_fn()
            except BaseException:  # noqa: BLE001 - a dead actor's clean-up has no caller to report to
                pass

        threading.Thread(target=close, name=f"kill-{self._name}", daemon=True).start()


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
        if actor._dead:
            return
        with actor._guard:
            idle = not actor._pending
        if idle:  # the orchestrator's clean-up at the end of a run: let queued work finish
            actor.shutdown()
        actor.die()
