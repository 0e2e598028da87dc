"""The trainer's ranks: N trainer actors formed into one torch.distributed group, called as one.

  group = TrainerGroup.start(ray, TrainerActor, model, cfg, out, ranks=2, num_cpus=1)
  stats = ray.get(group.step.remote(batch))     # every rank steps; rank 0's result
  group.kill()                                   # every rank

Rank 0 picks a free port on its node (`free_address`); every rank then joins with
init_process_group(backend, init_method="tcp://addr:port", rank, world_size) (`join_group`):
gloo when the trainer runs on CPU, NCCL on CUDA (one GPU per rank). Every call goes to every
rank in the same order, so their collectives pair up; the caller gets rank 0's result (the
others' are watched: an error there is raised at the group's next call, and `dead_rank` says
whether one died). One rank (ranks = 1) is the single trainer actor of before, without a
process group. A group that lost a rank is not repaired: the driver kills it and starts a new
one from the last checkpoint (dora.exec.recovery).
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

METHODS = ("step", "weights", "save_weights", "save_checkpoint", "resume", "resume_and_step", "broadcast_weights")
RANK0_METHODS = ("weight_sync_address", "version_held")  # answered by rank 0 alone


def free_address() -> str:
    """'ip:port' of a free TCP port on this node (for rank 0's rendezvous)."""
    from dora.exec.weight_sync import node_ip

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return f"{node_ip()}:{s.getsockname()[1]}"


def backend_for(device: str) -> str:
    """'nccl' when the trainer's device ('auto' | 'cpu' | 'cuda') resolves to CUDA, else 'gloo'."""
    import torch

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def join_group(address: str, rank: int, world: int, device: str, timeout_s: float = 600.0) -> str:
    """Join the trainer's process group at rank 0's `address`; returns the backend."""
    import torch

    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(0)  # Ray gives each rank its own visible GPU
    torch.distributed.init_process_group(backend, init_method=f"tcp://{address}", rank=rank, world_size=world,
                                         timeout=timedelta(seconds=timeout_s))
    return backend


class _GroupCall:
    def __init__(self, group: "TrainerGroup", name: str):
        self._group, self._name = group, name

    def remote(self, *args: Any) -> Any:
        """Call every rank (large arguments put once); rank 0's future."""
        g = self._group
        g.check()
        if len(g.actors) > 1:
            args = tuple(g.runtime.put(a) if isinstance(a, (list, dict)) else a for a in args)
        actors = g.actors[:1] if self._name in RANK0_METHODS else g.actors
        refs = [getattr(a, self._name).remote(*args) for a in actors]
        g.others.extend(refs[1:])
        return refs[0]


class TrainerGroup:
    """The trainer's N rank actors; `step`, `weights`, `save_weights`, `save_checkpoint`, `resume`,
    `resume_and_step`, `broadcast_weights` (every rank) and `weight_sync_address` (rank 0) have
    `.remote(...)` as on one actor, returning rank 0's future."""

    def __init__(self, actors: list, runtime, joins: list | None = None):
        self.actors = list(actors)
        self.runtime = runtime  # ray, or dora.exec.local_runtime.LocalRuntime (one rank)
        self.others: list = list(joins or [])  # futures of calls whose result nobody else reads
        self.errors: list[BaseException] = []  # errors of rank > 0 calls (check raises the first)

    @classmethod
    def start(cls, runtime, actor_cls, model: str, cfg, out: str, *, ranks: int, **options: Any) -> "TrainerGroup":
        """Start `ranks` Ray actors of `actor_cls` (model, cfg, out, rank, world) with Ray `options`;
        with ranks > 1 they form their group as soon as they are up (nothing here waits for it)."""
        remote = runtime.remote(actor_cls).options(**options)
        actors = [remote.remote(model, cfg, out, rank, ranks) for rank in range(ranks)]
        if ranks == 1:
            return cls(actors, runtime)
        address = actors[0].address.remote()
        return cls(actors, runtime, joins=[a.join.remote(address) for a in actors])

    def __getattr__(self, name: str) -> _GroupCall:
        if name not in METHODS and name not in RANK0_METHODS:
            raise AttributeError(name)
        return _GroupCall(self, name)

    def check(self) -> None:
        """Raise the error of any rank > 0 call that has failed; forget those that succeeded."""
        self._collect(0.0)
        if self.errors:
            raise self.errors[0]

    def _collect(self, timeout_s: float) -> None:
        """Settle the rank > 0 calls finished within `timeout_s` (all of them, or the time is up)."""
        if not self.others:
            return
        done, self.others = self.runtime.wait(self.others, num_returns=len(self.others), timeout=timeout_s)
        for ref in done:
            try:
                self.runtime.get(ref)
            except Exception as e:  # noqa: BLE001 - kept, raised by check()
                self.errors.append(e)

    def owns(self, ref) -> bool:
        """Whether `ref` is one of the rank > 0 calls the group watches."""
        return any(ref is r for r in self.others)

    def dead_rank(self, dead_errors: tuple[type[BaseException], ...], wait_s: float = 0.0) -> str:
        """'' if no rank > 0 call has failed because its actor died (waiting up to `wait_s` for them
        to settle: after rank 0 failed in a collective, the dead peer's call tells why); else how."""
        self._collect(wait_s)
        dead = [e for e in self.errors if isinstance(e, dead_errors)]
        return f"a trainer rank died ({type(dead[0]).__name__})" if dead else ""

    def kill_rank(self, rank: int) -> None:
        """Kill one rank's actor (fault injection; its peers fail at their next collective)."""
        self.runtime.kill(self.actors[rank])

    def kill(self) -> None:
        """Kill every rank (a restart starts a whole new group)."""
        self.others = []
        self.errors = []
        for a in self.actors:
            self.runtime.kill(a)
