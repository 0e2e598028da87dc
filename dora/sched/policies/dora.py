"""`dora`: DORA multi-version streaming rollout with a central orchestrator.

Mechanism (DORA, arXiv 2604.26256; LongCat-Flash-Thinking, arXiv 2509.18883):
- Several versions are served at once. New groups always start on the newest version;
  trajectories stream to the trainer as their groups complete; a group never changes
  version (C1 holds).
- Repartition: when a version is published the orchestrator moves instances to it, least
  old-version load first (predicted remaining tokens). An instance whose old-version load
  is at most `repartition_load` of its slots has its trajectories migrated, KV cache and
  all (no re-prefill), onto the busiest same-version peers, each filled to at most
  `pack_occupancy` of its slots (MoE decode of a tail is several times faster per token on
  a nearly empty instance); then it loads the new version. Old-version tails run to
  completion on the instances that keep their version.
  With versions_per_instance > 1 an instance instead loads the new version next to the old
  one and serves both until the old tails finish.
- Staleness: batches take the oldest version first. When a trainer step at version i would
  leave a group unable to be trained within η (`Policy.staleness_excess`), that group is
  aborted and regenerated on the newest version (logged; C2 holds). A group regenerated
  `max_regenerations` times is not aborted again: the trainer waits for it instead, so long
  answers are never systematically dropped.
- Staleness-aware supplementation: at each publication the orchestrator predicts how many
  in-flight groups will complete within the next step; if the buffer plus those falls short
  of B, extra groups (up to `supplement_max_share`·B) are admitted on the newest version.
- Dispatch and balancing use predicted completion: lengths come from finished group-mates
  or the running length distribution (LengthPredictor); a group's samples go to the
  newest-version instances whose predicted backlog per free slot is smallest.
- Elastic trainer devices (knob, LongCat's elastic colocation): while the trainer waits for
  data, its devices run rollout instances of the newest version (taking the new weights by
  an on-device reshard); when a step starts their trajectories migrate (KV) to the regular
  instance of their version with most room (queueing there), or are regenerated if none
  holds that version.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from dora.sched.config import PolicyConfig
from dora.sched.loadindex import LoadIndex
from dora.sched.predictor import LengthPredictor
from dora.sched.state import G_RUNNING, QUEUED_OR_RUNNING, GroupView, InstView
from dora.sched.streaming import StreamingPolicy


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass policies
class DoraPolicy(StreamingPolicy):
    name = "dora"

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        dc = cfg.dora
        self.elastic = dc.elastic_trainer
        self.dc = dc
        self.vpi = dc.versions_per_instance
        self.pred = LengthPredictor() if dc.predictor == "history" else None
        self.old = LoadIndex(cap=self._cap)  # its `free` tallies packing room (`_room`) per version
        self.extra = 0  # supplementation headroom for the current step
        self._last_step_s = 0.0
        self._last_pub = 0.0

    # ---- serving and placement --------------------------------------------------------------------
    def on_start(self) -> None:
        self._elastic = [i for i in self.view.instances.values() if i.elastic]
        caps = {self._cap(i) for i in self.view.instances.values() if not i.elastic}
        self._cap_max, self._cap_uniform = max(caps), len(caps) == 1
        self._room_min = self._cap_max if self._cap_uniform else 1  # room a candidate needs at least
        self.admit()

    def is_serving(self, inst: InstView) -> bool:
        # elastic instances serve only while the trainer waits
        return StreamingPolicy.is_serving(self, inst) and not (inst.elastic and self.view.trainer_busy)

    def work_left(self, inst: InstView) -> float:
        """Predicted tokens left on an instance: predicted lengths minus estimated progress."""
        pred = self.pred
        n = len(inst.active)
        if pred is None:
            return float(n)
        if n == 0:
            return 0.0
        left = inst.pred_sum - pred.rate.get(inst.id, pred.global_rate) * (n * self.now - inst.start_sum)
        return float(n) if n > left else left  # max(left, float(n))

    def predict_group(self, g: GroupView) -> float:
        return self.pred.predict_total(g.prompt_id, 0.0) if self.pred is not None else 0.0

    def pool_key(self, inst: InstView) -> float:
        """Predicted work per slot (as of the instance's last change; re-derived for every
        instance at each publication and trainer step)."""
        if self.pred is None:
            return super().pool_key(inst)
        return self.work_left(inst) / inst.max_seqs

    def pick_cost(self, g: GroupView) -> float:
        return 1.0 if self.pred is None else self.pred.predict_total(g.prompt_id, 0.0)

    def pick_step(self, inst: InstView, cost: float) -> float:
        return cost if self.pred is None else cost / inst.max_seqs

    def admission_cap(self) -> int:
        return StreamingPolicy.admission_cap(self) + self.extra

    # ---- repartition ------------------------------------------------------------------------------
    def old_load(self, inst: InstView) -> float:
        """Predicted remaining work on an instance that does not hold the newest version."""
        return self.work_left(inst)

    def repartition(self) -> None:
        """Move instances to the newest version, least old-version load first.

        Per old version: drained instances switch at once; then, fewest trajectories first
        (ties: least predicted remaining work), an instance with at most `repartition_load` of
        its slots busy switches when the packing room of its same-version peers (`_room`) can
        take its trajectories, which migrate to the busiest peers with room.
        Candidates come from the load buckets of `self.old`, so a call costs O(slots), not
        O(instances)."""
        latest = self.view.latest_version
        if not len(self.old):
            return
        if self.vpi > 1:
            self._repartition_multi([i for v in self.old.versions() for i in self.old.members(v)], latest)
            return
        for ver in self.old.versions():
            self._repartition_version(ver, latest)

    def _repartition_version(self, ver: int, latest: int) -> None:
        old = self.old
        drained = old.buckets[ver].get(0)  # old.bucket(ver, 0), inlined (called on most finishes)
        if drained:
            for inst in sorted(drained.values(), key=lambda i: i.id):
                self.load(inst, latest)  # drained: switch now
        room = old.free.get(ver, 0)  # packing room over the version's instances (sum of _room)
        if room < self._room_min:
            return  # a candidate needs room >= max(cap, its load)
        loads = old.loads(ver)
        share = self.dc.repartition_load
        for load in loads:
            if load > room:
                break  # a candidate needs room >= its load; loads ascend
            bucket = [i for i in old.bucket(ver, load) if load <= share * i.max_seqs]
            if not bucket:
                continue
            bucket.sort(key=lambda i: (self.old_load(i), i.id))
            for inst in bucket:
                if room - self._room(inst) < inst.load or not inst.settled():
                    continue
                room -= self._room(inst) + inst.load
                self._pack_away(ver, inst)
                self.load(inst, latest)
                if self._cap_uniform and room < self._cap_max:
                    return

    def _cap(self, inst: InstView) -> int:
        return max(int(self.dc.pack_occupancy * inst.max_seqs), 1)

    def _room(self, inst: InstView) -> int:
        """Slots an old-version peer still takes migrated tails into (packing cap minus its load)."""
        return max(self._cap(inst) - inst.load, 0)

    def _pack_away(self, ver: int, src: InstView) -> None:
        """Migrate all of `src`'s trajectories, each to the first of `_packing_peers` with room."""
        peers = iter(self._packing_peers(ver, src, src.load))
        p = next(peers)
        for tid in list(src.active):
            while self._room(p) <= 0:  # (a peer's room only shrinks here: never look back)
                p = next(peers)
            self.migrate(tid, p, kv=self.dc.migrate_kv)

    def _packing_peers(self, ver: int, src: InstView, need: int) -> list[InstView]:
        """Same-version instances with packing room, busiest first (ties: lowest id), as many
        as take `need` trajectories between them."""
        out = []
        for load in reversed(self.old.loads(ver)):
            if load >= self._cap_max:
                continue
            for p in self.old.at(ver, load):
                if p.id != src.id:
                    room = self._room(p)
                    if room > 0:
                        out.append(p)
                        need -= room
                        if need <= 0:
                            return out
        return out

    def _repartition_multi(self, old: list[InstView], latest: int) -> None:
        """versions_per_instance > 1: load the newest next to the old; evict versions with no work."""
        for inst in sorted(old, key=lambda i: (self.old_load(i), i.id)):
            live = {t.version for t in inst.active.values()}
            if not live:
                self.load(inst, latest)
            elif len(inst.versions) < self.vpi:
                self.load(inst, latest, mode="add")
            else:
                idle = sorted(v for v in inst.versions if v not in live)
                if idle:
                    self.load(inst, latest, mode="add", evict=idle[0])

    # ---- events -----------------------------------------------------------------------------------
    def on_published(self, version: int) -> None:
        self._last_step_s = self.now - self._last_pub
        self._last_pub = self.now
        self.repartition()
        self._plan_supplement()
        self.admit()

    def after_finish(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        pred = self.pred
        if pred is not None:
            t = self.view.trajs[traj]
            pred.observe(t.prompt_id, t.tokens, inst.id, self.now - t.t_start)
            if group_done is not None:
                pred.forget(group_done.prompt_id)
        old = self.old
        at = old.where.get(inst.id)
        if at is not None:
            if self.vpi > 1:
                self.repartition()
            elif 0 in old.buckets[at[0]] or old.free.get(at[0], 0) >= self._room_min:
                # only its version's loads changed; (else _repartition_version would do nothing)
                self._repartition_version(at[0], self.view.latest_version)

    def after_aborts(self) -> None:
        self.repartition()

    def on_loaded(self, inst: InstView, version: int) -> None:
        # a load that a newer publication overtook leaves an old-version instance: repartition
        # its version now (nothing else would: no finish happens on a drained instance)
        at = self.old.where.get(inst.id)
        if at is not None and self.vpi == 1:
            self._repartition_version(at[0], self.view.latest_version)
        elif at is not None:
            self.repartition()
        self.admit()

    def ready_batch(self) -> list[GroupView] | None:
        """Oldest B complete groups. Groups that training them would leave beyond η are aborted
        and regenerated on the newest version, except groups already regenerated
        `max_regenerations` times: for those the trainer waits (aborting a long group again and
        again would drop the long answers: a length-biased selection, C2)."""
        if len(self.view.buffer) < self.B:
            return None
        # Fast path for the common wait: an in-flight group that must be in this step (its
        # deadline is now) and may not be regenerated again. In-flight groups are in start
        # order, so versions ascend; the full check below finds the same answer.
        if self._overdue_for_good():
            return None
        if self.staleness_ok_counts(self.stalest_counts(self.B)):
            return self.stalest_first(self.B)
        batch = self.stalest_first(self.B)
        late, done = self.staleness_excess(batch, self.inflight.values())
        if any(g.attempts >= self.dc.max_regenerations for g in late):
            return None
        for g in late + done:
            self.regenerate(g, "stale")
        self.repartition()  # aborts may have drained old instances
        return batch  # the regenerated groups start when it trains (StreamingPolicy.train_batch)

    def _overdue_for_good(self) -> bool:
        """Some group of `overdue(inflight)` may not be regenerated again (the trainer must wait)."""
        last, limit = self.view.trainer_version - self.eta, self.dc.max_regenerations
        for g in self.inflight.values():  # start order: versions ascend
            if g.version > last:
                break
            if g.state == G_RUNNING and g.attempts >= limit:
                return True
        return False

    def on_trainer_idle(self) -> None:
        """The trainer waits for data: its devices take the new weights (an on-device reshard)
        and serve as rollout instances until the next step starts."""
        if not self.dc.elastic_trainer:
            return
        latest = self.view.latest_version
        for inst in self._elastic:
            if inst.alive and inst.loading < 0 and not inst.active and latest not in inst.versions:
                self.load(inst, latest)

    def train_batch(self, batch: list[GroupView]) -> None:
        self._vacate_elastic()
        super().train_batch(batch)

    def _vacate_elastic(self) -> None:
        """The trainer takes its devices back: trajectories on elastic instances move (with KV) to
        the regular instance of their version with the most free slots, queueing there if full."""
        if not self.dc.elastic_trainer:
            return
        regular = [i for i in self.view.instances.values() if i.alive and not i.elastic and i.loading < 0]
        for inst in self._elastic:
            for t in list(inst.active.values()):
                if t.state != QUEUED_OR_RUNNING:
                    continue
                peers = [i for i in regular if t.version in i.versions]
                if peers:
                    self.migrate(t.id, max(peers, key=lambda i: (i.free_slots(), -i.id)), kv=self.dc.migrate_kv)
                else:
                    g = self.view.groups[t.prompt_id]
                    self.regenerate(g, "elastic")

    def on_regenerate(self, g: GroupView) -> None:
        if self.pred is not None:
            self.pred.forget(g.prompt_id)
        super().on_regenerate(g)

    # ---- supplementation --------------------------------------------------------------------------
    def _plan_supplement(self) -> None:
        """Extra admission headroom when the next batch is predicted to fill late."""
        self.extra = 0
        self.cap_changed()
        if not self.dc.supplement or self.pred is None or self._last_step_s <= 0:
            return
        horizon = self._last_step_s
        p, now, trajs = self.pred, self.now, self.view.trajs
        rates, global_rate = p.rate, p.global_rate
        soon = 0
        for g in self.inflight.values():
            done = True
            med = p.mates_median(g.prompt_id)  # the same for every sample of the group
            for tid in g.trajs:
                t = trajs[tid]
                if t.state != QUEUED_OR_RUNNING:
                    continue
                r = rates.get(t.instance, global_rate)
                # p.predict_remaining(g.prompt_id, t.instance, now - t.t_start), with `med` read once
                gen = r * (now - t.t_start) if r > 0 else 0.0
                total = p.conditional_mean(gen) if med is None else max(med, gen + 1.0)
                if max(total - gen, 1.0) / (r or 1.0) > horizon:
                    done = False
                    break
            soon += done
        short = self.B - len(self.view.buffer) - soon
        if short > 0:
            self.extra = min(short, int(self.dc.supplement_max_share * self.B))
