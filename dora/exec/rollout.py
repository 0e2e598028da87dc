"""The executor's rollout side: the policy's rollout actions as calls on the engine actors, and
what the engines hand back as events. A mixin of the orchestrator (`dora.exec.orchestrator`):
it reads and writes the orchestrator's state.

  Dispatch     -> GenRequest to the engine (held there until its version is loaded)
  Migrate      -> kv=True: export the trajectory with its KV cache from the source, import it
                  on the destination (no re-prefill; engines with kv_migration only, else an
                  error); kv=False: abort on the source, resume prompt + generated tokens on
                  the destination (the re-prefill is logged)
  Abort        -> abort on the engine; its tokens are waste
  ReadKV       -> the engines' KV tokens in use (prompt + generated of running requests)
  LoadVersion  -> the trainer's weights for that version, loaded by the engine ('drain' or
                  'interrupt': continue in-flight requests under the new version): from the
                  object store, a checkpoint directory, or the engine's staged copy (collective)
  results      -> `finish` (or `lost`, when the engine hands a request back unrun) and
                  TrajectoryFinished; a finished load -> `load_end` and WeightsLoaded

Each live trajectory is a `dora.body.Tracked` in `live`; a finished one waits in `finished`
(with its engine result) for the trainer. A decode slot's share of the instance is charged to
each segment (busy = seconds held / max_num_seqs), so bubble ratios are computed by the same
code as in simulation.
"""

from __future__ import annotations

from dora.body import Tracked, end_row, load_row, start_row
from dora.errors import InputError
from dora.exec.faults import cut_last_tensor
from dora.sched import actions as A
from dora.sched import events as E


class Rollout:
    """Rollout-side translation for `Orchestrator` (which defines every attribute used here)."""

    def _request(self, t: Tracked, version: int):
        from dora.exec.engine import GenRequest, SamplingConfig

        k = self.example_of[t.prompt_id]
        return GenRequest(str(t.traj), self.prompt_ids[k], self.cfg.task.max_new_tokens, version,
                          SamplingConfig(temperature=self.cfg.rollout.temperature,
                                         seed=self.cfg.seed * 1_000_003 + t.prompt_id * 131 + t.sample_idx))

    def _end_segment(self, t: Tracked, event: str, tokens_now: int, now: float, version: int,
                     detail: str = "") -> None:
        """End `t`'s segment at `now`: the engine reports `tokens_now` tokens generated in all."""
        t.version = version
        t.made = max(tokens_now - t.before, 0)
        t.busy = (now - t.t_start) / self.slots
        end_row(self.log, now, event, t, detail)

    # ---- actions --------------------------------------------------------------------------------------
    def _dispatch(self, a: A.Dispatch, now: float) -> None:
        t = self.live[a.traj] = Tracked(a.traj, a.prompt_id, a.sample_idx, a.instance, a.version, now)
        req = self._request(t, a.version)
        start_row(self.log, now, "dispatch", t, len(req.prompt_ids))
        self.engines[a.instance].submit.remote([req])

    def _abort_on_engine(self, t: Tracked, export: bool = False):
        """The partial result of an aborted trajectory (`export`: its KVState, with the KV cache);
        None if it finished meanwhile; False if its instance is dead (the main loop then handles
        the failure)."""
        inst = t.instance
        if inst in self.dead or inst in self.dying:
            return False
        eng = self.engines[inst]
        try:
            if export:
                return self.ray.get(eng.export_kv.remote(str(t.traj)))
            (part,) = self.ray.get(eng.abort.remote([str(t.traj)]))
        except self.dead_errors as e:
            self.dying[inst] = f"actor died ({type(e).__name__})"
            return False
        return part

    def _migrate(self, a: A.Migrate, now: float) -> None:
        if a.kv:
            self._migrate_kv(a)
            return
        from dora.exec.engine import GenRequest

        t = self.live[a.traj]
        src = t.instance
        part = self._abort_on_engine(t)
        if part is None:
            return  # it finished meanwhile: its result comes with the next poll
        if part is False:
            return  # its instance died: lost with it (the failure is handled by the main loop)
        now = self.now()
        self._end_segment(t, "migrate_out", len(part.token_ids), now, part.version, detail=f"to {a.dst}")
        req = GenRequest.resume(part, max_new_tokens=self.cfg.task.max_new_tokens,
                                sampling=self._request(t, part.version).sampling)
        t.restart(now, a.dst, part.version, len(part.token_ids))
        start_row(self.log, now, "migrate_in", t, len(part.prompt_ids) + len(part.token_ids),
                  f"from {src} reprefill")
        self.engines[a.dst].submit.remote([req])
        self.deliver(E.MigrationDone(a.traj, src, a.dst))

    def _migrate_kv(self, a: A.Migrate) -> None:
        """Move a trajectory with its KV cache: export on the source, import on the destination."""
        if not self.kv_migration:
            raise RuntimeError(
                f"Migrate(traj={a.traj}, kv=True): the {self.cfg.rollout.backend} engines cannot move a KV cache, and "
                f"ClusterStarted told the policy so (kv_migration=False); policy {self.name!r} must migrate with "
                "kv=False there (check Policy.kv_migration), or run the hf backend")
        t = self.live[a.traj]
        src = t.instance
        state = self._abort_on_engine(t, export=True)
        if state is None or state is False:
            return  # finished meanwhile (its result comes with the next poll), or its instance died
        part = state.part
        now = self.now()
        self._end_segment(t, "migrate_out", len(part.token_ids), now, part.version, detail=f"to {a.dst}")
        t.restart(now, a.dst, part.version, len(part.token_ids))
        start_row(self.log, now, "migrate_in", t, len(part.prompt_ids) + len(part.token_ids), f"from {src} kv")
        if a.dst not in self.dead and a.dst not in self.dying:
            try:
                self.ray.get(self.engines[a.dst].import_kv.remote(state))
            except self.dead_errors as e:  # lost with its destination (the main loop handles the failure)
                self.dying[a.dst] = f"actor died ({type(e).__name__})"
        self.deliver(E.MigrationDone(a.traj, src, a.dst))

    def _abort(self, a: A.Abort, now: float) -> None:
        t = self.live.get(a.traj)
        if t is None:
            return
        part = self._abort_on_engine(t)
        if part is None:
            return  # finished meanwhile: the policy discards it when the result arrives
        if part is False:  # its instance is dead: what it generated there is gone
            self._end_segment(t, "abort", t.before, self.now(), self.policy.view.trajs[a.traj].version,
                              detail=a.reason)
        else:
            self._end_segment(t, "abort", len(part.token_ids), self.now(), part.version, detail=a.reason)
        del self.live[a.traj]

    def _load(self, a: A.LoadVersion, now: float) -> None:
        if a.mode not in ("drain", "interrupt"):
            raise InputError(f"load mode {a.mode!r}: the engines support 'drain' and 'interrupt' only")
        load_row(self.log, now, "load_start", a.instance, a.version, a.mode)
        if self.held.get(a.instance) == a.version:  # a replacement came back with it: nothing to load
            self.noop_loads.append((a.instance, a.version, a.mode, now))
            return
        self._send_load(a.instance, a.version, a.mode, now)

    def _send_load(self, inst: int, version: int, mode: str, t_start: float) -> None:
        src = self.weights[version]
        eng = self.engines[inst]
        hit = next((x for x in self.inject_load if x[0] == inst and version >= x[1]), None)
        if hit is not None:  # fault injection: the weights arrive cut short
            self.inject_load.remove(hit)
        sync = self.cfg.rollout.weight_sync
        if sync == "collective":  # staged there by the publication's broadcast: no transfer
            fut = eng.load_staged.remote(version, mode, hit is not None)
        elif sync == "tensors":
            fut = eng.load_weights.remote(version, cut_last_tensor(self.ray.get(src)) if hit else src, mode)
        else:
            fut = eng.load_checkpoint.remote(version, src, mode)
        self.loads[fut] = (inst, version, mode, t_start)

    def kv_in_use(self, instances: tuple[int, ...]) -> tuple[int, ...]:
        """These engines' KV-cache tokens in use (0 for a dead one)."""
        refs = {i: self.engines[i].kv_in_use.remote() for i in instances
                if i not in self.dead and i not in self.dying}
        used = []
        for i in instances:
            n = 0
            if i in refs:
                try:
                    n = self.ray.get(refs[i])
                except self.dead_errors as e:
                    self.dying[i] = f"actor died ({type(e).__name__})"
            used.append(n)
        return tuple(used)

    # ---- what comes back ------------------------------------------------------------------------------
    def _poll(self) -> bool:
        """Collect the engines' finished requests; whether there were any."""
        live = [i for i in range(len(self.engines)) if i not in self.dead and i not in self.dying]
        refs = [(i, self.engines[i].poll.remote(0.02)) for i in live]
        did = False
        for inst, ref in refs:
            try:
                results = self.ray.get(ref)
            except self.dead_errors as e:
                self.dying[inst] = f"actor died ({type(e).__name__})"
                continue
            for r in results:
                did = True
                self._on_result(inst, r)
        return did

    def _on_result(self, inst: int, r) -> None:
        traj = int(r.request_id)
        t = self.live.get(traj)
        if t is None:
            return  # aborted or migrated away: its stop was logged already
        now = self.now()
        if r.finish_reason == "abort":  # handed back unrun (its version can never load there)
            self._end_segment(t, "lost", len(r.token_ids), now, r.version, detail="engine returned it")
            del self.live[traj]
            self.deliver(E.TrajectoryLost(traj, inst, "engine"))
            return
        seg_version = r.versions[-1] if r.versions else r.version
        if r.t_submit > 0 and r.t_finish > 0:
            w = self.t0_wall
            self.requests.append((inst, t.t_start, r.t_submit - w, (r.t_first_token or r.t_finish) - w,
                                  r.t_finish - w, now, len(r.token_ids) - t.before))
        self._end_segment(t, "finish", len(r.token_ids), now, seg_version)
        del self.live[traj]
        self.finished[traj] = (t, r, now)
        self.last_fin_t = now
        self.deliver(E.TrajectoryFinished(traj, inst, len(r.token_ids)))

    def _on_loaded(self, inst: int, version: int, mode: str, t_start: float) -> None:
        now = self.now()
        if mode == "interrupt":  # in-flight requests went on under `version` after a re-prefill
            view = self.policy.view
            for t in [t for t in self.live.values() if t.instance == inst]:
                old_version = view.trajs[t.traj].version  # the policy learns of the load below
                if old_version == version:
                    continue
                try:
                    part = self.ray.get(self.engines[inst].peek.remote(str(t.traj)))
                except self.dead_errors as e:  # it died right after loading: the failure path takes over
                    self.dying[inst] = f"actor died ({type(e).__name__})"
                    return
                if part is None:
                    continue  # finished before the load: its result is on the way
                old = sum(1 for v in part.versions if v != version)
                self._end_segment(t, "interrupt", old, t_start, old_version)
                t.restart(t_start, inst, version, old)
                start_row(self.log, t_start, "resume", t, len(part.prompt_ids) + old)
        load_row(self.log, now, "load_end", inst, version, mode, now - t_start)
        self.held[inst] = version
        self.deliver(E.WeightsLoaded(inst, version))
