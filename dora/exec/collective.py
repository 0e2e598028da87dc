"""The executor's collective weight sync (`rollout.weight_sync=collective`): at each publication
the trainer broadcasts the new version to every live engine, which stages it; a LoadVersion then
applies a staged version on its engine with no transfer (`dora.exec.rollout`). A mixin of the
orchestrator: it reads and writes the orchestrator's state.

The group (dora.exec.weight_sync) is the trainer (rank 0) and the members (ranks 1..n, in
instance order). It is kept while the members and the trainer process stay the same; otherwise
the next broadcast makes a new generation. A member whose receive fails gets the version again
in a group of its own (up to SYNC_ATTEMPTS tries, then it is retired like an engine whose loads
keep failing); a dead one is left to the failure path. A replacement engine joins at the next
publication (or at once when the trainer is idle) and comes back holding that version.
Each broadcast is a `weight_sync_start` / `weight_sync_end` row pair with its bytes.
"""

from __future__ import annotations

from dora.body import instance_row, weight_sync_row
from dora.exec.recovery import TrainerLost
from dora.exec.run_config import ExecConfig
from dora.exec.weight_sync import abort_group, group_spec

SYNC_ATTEMPTS = 3


def _abort_quietly(spec: dict) -> None:
    """Abort a generation whose trainer died; its store may have died with it (its members'
    next call on the store then fails anyway)."""
    try:
        abort_group(spec)
    except Exception:  # noqa: BLE001 - no store to reach: nothing to abort
        pass


def sync_backend(cfg: ExecConfig) -> str:
    """The group's backend as the trainer is asked for it: 'auto' stays 'auto' (the trainer picks nccl
    on CUDA, else gloo) except in the local runtime, where the trainer and every engine are one process
    that NCCL cannot join as several members of one device: there it is gloo."""
    backend = cfg.rollout.weight_sync_backend
    return "gloo" if backend == "auto" and cfg.runtime == "local" else backend


class Collective:
    """Collective weight sync for `Orchestrator` (which defines every attribute used here)."""

    def _sync_members(self) -> list[int]:
        live = [i for i in range(len(self.engines)) if i not in self.dead and i not in self.dying]
        return sorted(set(live) | set(self.awaiting_sync))

    def _sync_spec(self, members: list[int]) -> dict:
        """The group of the trainer and `members`: the current one if they are unchanged, else a
        new generation (asking a new trainer process for its store's address first)."""
        g = self.sync_group
        if g is not None and g[0] is self.trainer and g[1] == tuple(members):
            return g[2]
        if self.sync_addr is None or self.sync_addr[0] is not self.trainer:
            backend = sync_backend(self.cfg)
            self.sync_addr = (self.trainer, self.ray.get(self.trainer.weight_sync_address.remote(backend)))
        self.sync_gen += 1
        spec = group_spec(self.sync_addr[1], self.sync_gen, len(members) + 1, self.cfg.rollout.weight_sync_timeout_s)
        self.sync_group = (self.trainer, tuple(members), spec)
        return spec

    def _publish_collective(self) -> None:
        """Broadcast the new version to the members; replacements waiting for it then load it."""
        v = self.version
        staged = self._broadcast(v, self._sync_members())
        self.weights[v] = "collective"  # staged on the engines; the entry marks it loadable
        for inst in [i for i in self.awaiting_sync if i in staged]:
            t_start = self.awaiting_sync.pop(inst)
            self.recovering[self.engines[inst].load_staged.remote(v, "drain")] = (inst, v, t_start)

    def _catch_up(self, inst: int, t_start: float) -> None:
        """A replacement is up: it needs the newest version. With the trainer idle, send it now;
        else it joins the next publication's group (the trainer is busy with that step)."""
        self.awaiting_sync[inst] = t_start
        if self.train_job is None and self.restarting is None:
            v = self.version
            self._inject_trainer_kill("catch_up", v + 1)
            try:
                staged = self._broadcast(v, [inst])
            except Exception as e:  # noqa: BLE001 - the idle trainer died: the next step's start finds it dead
                if not self._trainer_lost(e):  # and a new trainer redoes that step, then publishes to this one
                    raise
                return
            if inst in staged:
                self.awaiting_sync.pop(inst)
                self.recovering[self.engines[inst].load_staged.remote(v, "drain")] = (inst, v, t_start)

    def _broadcast(self, version: int, members: list[int]) -> set[int]:
        """Send `version` to `members` (concurrent calls: the trainer sends, each engine receives
        and stages); resend to those whose receive failed. Returns the members that staged it."""
        keep_from = version - self.cfg.policy.eta - 1
        pending, staged, errors = list(members), set(), {}
        for attempt in range(1, SYNC_ATTEMPTS + 1):
            if not pending:
                break
            spec = self._sync_spec(pending)
            t0 = self.now()
            how = f"collective {spec['backend']} to instances {pending}, generation {spec['generation']}"
            weight_sync_row(self.log, t0, "weight_sync_start", version, detail=how)
            tref = self.trainer.broadcast_weights.remote(spec, version, self.cfg.rollout.dtype)
            refs = {i: self.engines[i].receive_weights.remote(spec, rank, keep_from)
                    for rank, i in enumerate(pending, 1)}
            failed, left, aborted = [], {ref: i for i, ref in refs.items()}, False
            watch_trainer = True
            while left:  # as they come: a dead member (or trainer) aborts the generation, so no one waits for it
                ready, _ = self.ray.wait(list(left) + ([tref] if watch_trainer else []), num_returns=1)
                for ref in ready:
                    if ref is tref:
                        watch_trainer = False
                        if self._trainer_failed(tref) and not aborted:  # it will never join: free the members
                            _abort_quietly(spec)
                            aborted = True
                        continue
                    i = left.pop(ref)
                    try:
                        self.ray.get(ref)
                        staged.add(i)
                    except self.dead_errors as e:
                        self._sync_member_died(i, f"actor died ({type(e).__name__})")
                        if not aborted:
                            abort_group(spec)
                            aborted = True
                    except Exception as e:  # noqa: BLE001 - received nothing usable: sent again
                        errors[i] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
                        failed.append(i)
            nbytes, trainer_err = 0, ""
            try:
                nbytes = int(self.ray.get(tref)["bytes"])
            except Exception as e:  # noqa: BLE001 - the trainer died (restarted by the driver), or a member dropped out
                why = self._trainer_death(e)
                if why:
                    weight_sync_row(self.log, self.now(), "weight_sync_end", version, 0, self.now() - t0,
                                    f"{how}: the trainer died")
                    self.sync_group = None
                    if self.start_trainer is None:
                        raise
                    raise TrainerLost(why) from e  # the diagnosis, for the caller's restart
                trainer_err = f"; trainer: {type(e).__name__}"
            now = self.now()
            done = sorted(i for i in refs if i in staged)
            weight_sync_row(self.log, now, "weight_sync_end", version, nbytes if done else 0, now - t0,
                            f"{how}: staged on {done}{trainer_err}")
            if failed or trainer_err or len(done) < len(refs):
                self.sync_group = None  # a failed collective leaves the group unusable: a new generation
            pending = failed
        for i in pending:  # failed every attempt: retired, as an engine whose loads keep failing
            self.retired.add(i)
            self.ray.kill(self.engines[i])
            self._sync_member_died(i, f"retired: weight sync of version {version} failed {SYNC_ATTEMPTS} times "
                                      f"({errors[i]})")
        return staged

    def _trainer_failed(self, tref) -> bool:
        try:
            self.ray.get(tref)
        except Exception:  # noqa: BLE001 - read again below
            return True
        return False

    def _sync_member_died(self, inst: int, why: str) -> None:
        if inst in self.awaiting_sync:  # a replacement that died before coming back: down for good
            self.awaiting_sync.pop(inst)
            self.no_restart.add(inst)
            instance_row(self.log, self.now(), "fail", inst, detail=f"replacement failed: {why}")
        else:
            self.dying[inst] = why
