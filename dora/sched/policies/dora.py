"""`dora`: DORA multi-version streaming rollout with a central orchestrator.

Mechanism (DORA, arXiv 2604.26256; LongCat-Flash-Thinking, arXiv 2509.18883):
- Several versions are served at once. New groups always start on the newest version;
  trajectories stream to the trainer as their groups complete; a group never changes
  version (C1 holds).
- Every orchestration decision is weighed by the scheduler's own estimate of its effect
  (`dora.sched.progress`: tokens made per trajectory from the decode-cost model the body
  gives and the placements the scheduler made, each instance's speed learned from the
  finishes it sees; `LengthPredictor`: remaining length from the run's own history; the
  trainer's step time as observed). A trajectory of version v is *at risk* when it is
  predicted to finish after the trainer would start step v + η, the last that may train it.
- Repartition: an instance that no longer holds the newest version and has drained either
  loads the newest version or, when the newest version has slots enough for every group
  the staleness cap admits (more slots would stand idle), hosts the at-risk trajectory of
  its version that is predicted to finish last: alone on an instance a long-tail trajectory
  decodes several times faster than in a full batch (`spread_tails`); with `host_max` > 1 so
  may an old-version instance running a few trajectories, when that ends the later of them sooner.
- A migration re-prefills on the destination; with `migrate_kv` on it ships the KV cache where
  that costs fewer sequence-seconds (`DecodeCost.kv_pays`; never when the body cannot move KV:
  `ClusterStarted.kv_migration`).
- Consolidation: when groups wait for slots, an old-version instance with at most
  `repartition_load` of its slots busy moves all its trajectories onto the
  busiest same-version peer that can take them while none of them becomes at risk, and
  loads the newest version (`consolidate`). Slots are needed only for groups the run will
  train (`run_length`): once those all have slots (the run's last steps), drained instances
  host tails instead. Consolidation runs only while data paces the trainer, or while at
  least half of the version's running trajectories wait for tool calls (then none may end
  after the version's predicted last finish: a slower decode barely delays a trajectory that
  mostly waits on tools).
  With versions_per_instance > 1 an instance instead loads the new version next to the old
  one and serves both until the old tails finish.
- Staleness: batches take the oldest version first. When a trainer step at version i would
  leave a group unable to be trained within η (`Policy.staleness_excess`), that group is
  aborted and regenerated on the newest version (logged; C2 holds), at most
  `max_regenerations` times per group; after that the trainer waits for it, so long
  answers are never systematically dropped.
- Spread starts (light load: the staleness cap, not the decode slots, limits the work): a new
  group does not go to an instance its predicted contexts would overflow (KV memory), and it
  waits for the instances about to serve the newest version (loading it, or old ones predicted
  to drain soon) when its samples are predicted to finish at least 20% sooner there, the
  waiting groups and the pool's residents then spread over more instances (`spread_starts`).
- Dispatch and balancing use predicted completion: lengths come from finished group-mates
  or the running length distribution (LengthPredictor); a group's samples go to the
  newest-version instances whose predicted backlog per free slot is smallest.
- Tool calls (`tool_calls`; multi-turn trajectories, from the body's tool-call events): a
  trajectory waiting for a tool call makes no tokens (its progress stops) and leaves the
  decode batch, so its slot is lent to new groups until the call ends; the instance may then
  hold more trajectories than slots, the returning one queueing as the engine queues it.
- Lending (knob `lend_trainer`, `dora.sched.lending`): while the trainer sets the pace, drained
  rollout instances are lent to it (their devices shorten its steps) where the capacity left
  keeps up, the groups at their staleness deadline leave the steps room to shrink, and the
  saving repays the trainer's resize; taken back when a step waits.
- Elastic trainer devices (knob, LongCat's elastic colocation): while the trainer waits for
  data, its devices run rollout instances of the newest version (taking the new weights by
  an on-device reshard); when a step starts their trajectories migrate to the regular
  instance of their version with most room (queueing there), or are regenerated if none
  holds that version.
"""

from __future__ import annotations

from collections.abc import Iterable

from mypy_extensions import mypyc_attr

from dora.sched.calibration import RemainderCalibration
from dora.sched.cohort import VersionCohorts
from dora.sched.config import PolicyConfig
from dora.sched.lending import Lending
from dora.sched.policies.dora_config import DoraConfig
from dora.sched.pace import TrainerPace
from dora.sched.predictor import LengthPredictor
from dora.sched.progress import Progress
from dora.sched.state import G_RUNNING, MIGRATING, QUEUED_OR_RUNNING, GroupView, InstView
from dora.sched.streaming import StreamingPolicy

_SOURCES_LOOKED_AT = 4  # per hosting decision: the most crowded instances whose tails are weighed
_DESTINATIONS_LOOKED_AT = 8  # per consolidation: peers weighed as destinations
_RETRY_S = 1.0  # a consolidation pass that moved nothing is not repeated for this long (simulated s)
_SHADOW_BETS = 32  # per publication: trajectories the calibration bets on without moving them
_WAIT_GAIN = 0.8  # a group waits for fresh instances only to finish at least 20% sooner (estimate noise)


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass policies
class DoraPolicy(StreamingPolicy):
    name = "dora"

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        dc: DoraConfig = cfg.dora
        self.elastic = dc.elastic_trainer
        self.lends = dc.lend_trainer
        self.dc = dc
        self.vpi = dc.versions_per_instance
        self.pred = LengthPredictor() if dc.predictor == "history" else None
        self.balance = dc.balance == "predicted"
        self.prog = Progress(self.view.cost)  # replaced in on_start by one with the body's costs
        self._lent: dict[int, int] = {}  # trajectory in a tool call -> instance it lends a slot on
        self.pace = TrainerPace(self.eta, self.B)
        self._incoming: dict[int, int] = {}  # instances loading the newest version -> their slots
        self._retry: dict[int, float] = {}  # version -> no consolidation pass before this time
        self._ready_at: dict[int, float] = {}  # instances loading the newest version -> predicted load end
        self.calib = RemainderCalibration(cap=dc.widen_max)  # how far consolidation's cautious remainders ran short
        self._c = 1.0  # its factor, as of the current consolidation pass
        self._widen = dc.consolidate and dc.widen_max > 1 and self.pred is not None  # the calibration is kept and applied
        self.cohorts = VersionCohorts() if dc.cohort_check else None  # each version's finished and running lengths
        self.lending: Lending | None = None  # instances lent to the trainer (lend_trainer, where the body can)

    # ---- serving and placement --------------------------------------------------------------------
    def on_start(self) -> None:
        lends = self.dc.lend_trainer and self.can_lend
        self.prog = Progress(self.view.cost)
        for iid in self.view.instances:
            self.prog.add_instance(iid)
        self._elastic = [i for i in self.view.instances.values() if i.elastic]
        self._cap_max = max(i.max_seqs for i in self.view.instances.values() if not i.elastic)
        self._slots_total = sum(i.max_seqs for i in self.view.instances.values() if not i.elastic)
        if lends and self.train_cost is not None:
            self.lending = Lending(self.view.cost, self.train_cost, self.view.trainer_devices, self.pace)
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
        return self.pred.predict_total(g.prompt_id, 0.0) if self.balance and self.pred is not None else 0.0

    def pool_key(self, inst: InstView) -> float:
        """balance = predicted: predicted work per slot (as of the instance's last change; re-derived
        for every instance at each publication and trainer step); else most free slots first."""
        if not self.balance or self.pred is None:
            return super().pool_key(inst)
        return self.work_left(inst) / inst.max_seqs

    def pick_cost(self, g: GroupView) -> float:
        return 1.0 if not self.balance or self.pred is None else self.pred.predict_total(g.prompt_id, 0.0)

    def pick_step(self, inst: InstView, cost: float) -> float:
        return cost if not self.balance or self.pred is None else cost / inst.max_seqs

    def place(self, g: GroupView) -> list[InstView] | None:
        """Water-fill the pool (StreamingPolicy.place), unless (spread_starts, light load) the
        instance it would fill first cannot hold the group's predicted contexts, or the group is
        predicted to finish sooner by waiting for instances about to serve the newest version."""
        if self.dc.spread_starts and self.pred is not None and self.pool_free >= g.size and self._slots_spare():
            top = self.first_pick()
            if top is not None and top.active:
                total = self.pred.predict_total(g.prompt_id, 0.0)
                share = -(-g.size // len(self.pool))
                if (len(top.active) + share) * (g.prompt_len + total) > top.kv_tokens:
                    return None  # the residents' and the group's predicted contexts overflow its KV memory
                if self._wait_pays(g, top.max_seqs, total):
                    return None
        return StreamingPolicy.place(self, g)

    def _slots_spare(self) -> bool:
        """Every group the staleness cap lets decode (the groups it admits, less the finished ones
        waiting for the trainer) fits in the cluster's decode slots with slots to spare: the cap,
        not the slots, limits the newest version's work (light load)."""
        cap = self._admit_cap
        if cap is None:
            cap = self._admit_cap = self.admission_cap()
        return (cap - len(self.view.buffer)) * (self.G or 1) < self._slots_total

    def _ready_soon(self) -> list[float]:
        """Predicted times at which instances start serving the newest version: those loading it,
        and the least busy old ones once drained and loaded; soonest first."""
        now, load_s = self.now, self.view.cost.weight_load_s
        ready = list(self._ready_at.values())
        looked = 0
        for ver in self.old.versions():
            for load in self.old.loads(ver):
                for inst in self.old.bucket(ver, load):
                    if looked >= _SOURCES_LOOKED_AT:
                        break
                    looked += 1
                    ready.append(now + self._drain_s(inst) + load_s)
        ready.sort()
        return ready

    def _spread_s(self, n: float, slots: int, total: float, plen: int) -> float:
        """Seconds for a sample of `total` tokens beside n - 1 others (at most `slots`) of mean
        context plen + total / 2 (f = 1)."""
        n = min(max(n, 1.0), float(slots))
        return self.view.cost.time_for(total, int(n + 0.5), n * (plen + total / 2.0), 1.0)

    def _wait_pays(self, g: GroupView, slots: int, total: float) -> bool:
        """A sample of `g` (`total` tokens predicted) finishes at least 20% sooner if the group
        waits for the instances about to serve the newest version: the waiting groups and the
        pool's residents spread over more instances then, over the pool alone now."""
        ready = self._ready_soon()
        if not ready:
            return False
        n_pool = len(self.pool)
        demand = n_pool * slots - self.pool_free + g.size * max(len(self.backlog), 1)
        now_s = self._spread_s(demand / n_pool, slots, total, g.prompt_len)
        j, last = 0, len(ready) - 1
        while True:  # waiting for the 1st, 2nd, 4th, 8th... instance to come, and for the last
            if ready[j] - self.now + self._spread_s(demand / (n_pool + j + 1), slots, total, g.prompt_len) < \
                    _WAIT_GAIN * now_s:
                return True
            if j == last:
                return False
            j = min(2 * j + 1, last)

    # ---- progress bookkeeping (every change of where a trajectory runs) -----------------------------
    def start_group(self, g: GroupView, version: int, instances: list[InstView], pred: float = 0.0) -> None:
        super().start_group(g, version, instances, pred)
        prog, now, plen, trajs = self.prog, self.now, g.prompt_len, g.trajs
        for k in range(len(trajs) - g.size, len(trajs)):
            prog.join(trajs[k], instances[k - len(trajs) + g.size].id, plen, 0.0, now)

    def migrate(self, traj: int, dst: InstView, kv: bool = True) -> None:
        self._take_back(traj)
        super().migrate(traj, dst, kv)
        self.prog.move(traj, dst.id, self.now)

    def move(self, traj: int, dst: InstView, residents: int) -> None:
        """Migrate `traj` to `dst` (which will hold `residents` others), with its KV cache where
        that costs less than re-prefilling it there (`DecodeCost.kv_pays`; never: migrate_kv off or
        no KV migration in this body)."""
        self.migrate(traj, dst, kv=self._kv(traj, dst, residents))

    def on_tool_call(self, traj: int, inst: int, tokens: int) -> None:
        if not self.dc.tool_calls:
            return
        prog = self.prog
        if tokens >= 0:
            prog.tool_back(traj, tokens, self.now)
            self._take_back(traj)
            return
        prog.tool_call(traj, self.now)
        at = prog.where(traj)  # (a trajectory moving when its call started waits at the destination)
        if at >= 0 and traj not in self._lent:
            self._lent[traj] = at
            self.add_slots(self.view.instances[at], 1)
            self.admit()

    def _take_back(self, traj: int) -> None:
        """The slot lent while `traj` waits for a tool call is taken back (the call ended, or it
        moves, ends or is lost)."""
        at = self._lent.pop(traj, -1)
        if at >= 0:
            self.add_slots(self.view.instances[at], -1)

    def _kv(self, traj: int, dst: InstView, residents: int) -> bool:
        prog = self.prog
        ctx = prog.plen[traj] + prog.generated(traj, self.now)
        return self.dc.migrate_kv and self.kv_migration and self.view.cost.kv_pays(ctx, residents, prog.f[dst.id])

    def abort(self, traj: int, reason: str) -> None:
        self._take_back(traj)
        super().abort(traj, reason)
        self.prog.leave(traj, self.now)
        self.calib.drop(traj)

    def regenerate(self, g: GroupView, reason: str) -> None:
        trajs = self.view.trajs
        for tid in g.trajs:
            st = trajs[tid].state
            if st == QUEUED_OR_RUNNING or st == MIGRATING:
                self._take_back(tid)
                self.prog.leave(tid, self.now)
                self.calib.drop(tid)
        super().regenerate(g, reason)

    def on_lost(self, traj: int, inst: int) -> None:
        self._take_back(traj)
        self.prog.leave(traj, self.now)
        self.calib.drop(traj)
        super().on_lost(traj, inst)

    def load(self, inst: InstView, version: int, mode: str = "drain", evict: int = -1) -> None:
        super().load(inst, version, mode, evict)
        self.prog.pause(inst.id, self.now)
        if version == self.view.latest_version:
            self._incoming[inst.id] = inst.max_seqs
            self._ready_at[inst.id] = self.now + self.view.cost.weight_load_s

    # ---- estimates ------------------------------------------------------------------------------
    def deadline(self, version: int, paced: bool = False) -> float:
        """Predicted start of step version + η, the last that may train a group of `version`
        (`TrainerPace.deadline`)."""
        v = self.view
        return self.pace.deadline(version, self.now, v.trainer_version, v.trainer_busy, paced)

    def remaining(self, traj: int, cautious: bool = False, bound: bool = False, widen: bool = True) -> float:
        """Predicted tokens a running trajectory has still to make: the mean of the lengths seen
        beyond what it has made, or (`cautious`) their 90th percentile; without a history, as
        long again as it has run (a heavy tail's median residual), or (cautious) three times.
        `bound` (cautious, for a delay that must not make the trainer wait): with fewer than 10
        lengths seen beyond what it has made (no 90th percentile in them), or (`cohort_check`)
        ending before a tenth of its version's longer trajectories have run while still running
        (`VersionCohorts.floor`: the history then lacks the long ones), the larger of the two
        (and at least to that point); (`widen`) times the factor by which such bounds have run
        short so far (`RemainderCalibration`)."""
        g = self.prog.generated(traj, self.now)
        pred = self.pred
        if pred is None:
            return (3.0 * g if cautious else g) + 1.0
        if not cautious:
            return max(pred.conditional_mean(g) - g, 1.0)
        total, seen = pred.quantile_and_count(g, 0.9)
        rem = max(total - g, 1.0)
        if not bound:
            return rem
        rem = max(rem, 3.0 * g + 1.0) if seen < 10 else rem
        cohorts = self.cohorts
        if cohorts is not None:
            ver = self.view.trajs[traj].version
            if cohorts.stale(ver, self.now):
                self._refresh_cohort(cohorts, ver)
            x = cohorts.floor(ver, g)
            if x > total:  # refuted by the version's own running trajectories
                rem = max(rem, x - g, 3.0 * g + 1.0)
        return rem * self._c if widen else rem

    def _refresh_cohort(self, cohorts: VersionCohorts, ver: int) -> None:
        now, prog = self.now, self.prog
        running: list[int] = []
        for inst in self.old.members(ver):
            running.extend(inst.active)
        cohorts.refresh(ver, now, running, lambda t: prog.generated(t, now))

    def _tick(self, completed: int = 0) -> None:
        v = self.view
        self.pace.tick(self.now, v.trainer_busy, len(v.buffer) - completed, v.trainer_version)

    def data_bound(self) -> bool:
        return self.pace.data_bound(self.view.trainer_version)

    def capacity_needed(self, ahead: int = 0) -> bool:
        """Groups the staleness cap admits now (and after `ahead` more trainer steps) would find
        no free slots on the newest version, counting instances already loading it: one more
        instance serving it would be put to work. Never (`run_length`) when every group the run
        will still train (its `steps`, where the body gives them) has its slots: a slot freed for
        a group the run never trains shortens no step."""
        if self.dc.run_length and self.run_steps > 0:
            left = (self.run_steps - self.view.steps_begun()) * self.B
            if self.untrained - len(self.backlog) >= left:
                return False  # every group the run will still train has its slots
        if self.backlog:
            return True
        cap = self._admit_cap
        if cap is None:
            cap = self._admit_cap = self.admission_cap()
        want = cap - self.untrained + ahead * self.B
        return want > 0 and want * (self.G or 1) > self.pool_free + sum(self._incoming.values())

    # ---- repartition ------------------------------------------------------------------------------
    def repartition(self) -> None:
        """Every old version: drained instances host an at-risk tail or load the newest version;
        consolidate when capacity is needed."""
        latest = self.view.latest_version
        if not len(self.old):
            return
        if self.vpi > 1:
            self._repartition_multi([i for v in self.old.versions() for i in self.old.members(v)], latest)
            return
        for ver in self.old.versions():
            self._repartition_version(ver, latest)

    def _repartition_version(self, ver: int, latest: int) -> None:
        buckets = self.old.buckets[ver]
        drained = buckets.get(0)  # old.bucket(ver, 0), inlined (called on most finishes)
        if drained:
            tails: dict[int, tuple[int, float, float, float]] = {}
            for inst in sorted(drained.values(), key=lambda i: i.id):
                if self._host_tail(ver, inst, tails):
                    tails = {}  # a tail moved: its source's candidate changed
                else:
                    self.load(inst, latest)  # drained: switch now
        if self.dc.host_max > 1 and self.dc.spread_tails and not self.capacity_needed():
            self._host_more(ver, buckets)
        if self.dc.consolidate and self.capacity_needed():
            tools = self._tool_bound(ver)
            if tools or self.data_bound():
                self._consolidate(ver, latest, tools)

    def _tool_bound(self, ver: int) -> bool:
        """At least half of `ver`'s running trajectories wait for a tool call now (`tool_calls`):
        tool waits, which no decode slowdown lengthens, decide when the version ends."""
        lent = self._lent
        if not lent:
            return False
        trajs = self.view.trajs
        k = 0
        for t in lent:
            if trajs[t].version == ver:
                k += 1
        return k > 0 and 2 * k >= sum(len(inst.active) for inst in self.old.members(ver))

    def _last_finish(self, ver: int) -> float:
        """Predicted time `ver`'s last running trajectory ends: the latest of its instances'
        drains with mean remainders (`_drain_s`; tool waits not counted)."""
        return self.now + max((self._drain_s(inst, mean=True) for inst in self.old.members(ver)), default=0.0)

    def _host_more(self, ver: int, buckets: dict[int, dict[int, InstView]]) -> None:
        """Instances of `ver` with fewer than `host_max` trajectories, least busy first (at most
        _SOURCES_LOOKED_AT of them, in index order), offer to host one more of its tails; the first that
        does stops."""
        looked = 0
        tails: dict[int, tuple[int, float, float, float]] = {}  # per source, shared by the hosts asked
        for load in range(1, self.dc.host_max):
            hosts = buckets.get(load)
            if not hosts:
                continue
            for inst in hosts.values():
                if looked >= _SOURCES_LOOKED_AT:
                    return
                looked += 1
                if inst.settled() and self._host_tail(ver, inst, tails):
                    return

    def _host_tail(self, ver: int, host: InstView, tails: dict[int, tuple[int, float, float, float]]) -> bool:
        """Move to `host` (drained, or running fewer than `host_max` trajectories) the at-risk
        trajectory of `ver` predicted to finish last, if the later of it and the host's own, slowed
        by it, finishes at least 5% earlier; only while the newest version needs no more slots.
        `tails`: each source's candidate (`_tail_of`), filled here and kept across the hosts of one
        pass until a tail moves."""
        if not self.dc.spread_tails or self.capacity_needed():
            return False
        now, prog, old = self.now, self.prog, self.old
        dl = self.deadline(ver)
        best, best_fin = -1, 0.0
        own: list[tuple[int, float]] | None = None  # the host's trajectories and mean remainders
        looked = 0
        for load in reversed(old.loads(ver)):
            if load < 2 or looked >= _SOURCES_LOOKED_AT:
                break  # alone on its instance, a trajectory gains nothing from moving
            for src in old.bucket(ver, load):
                if looked >= _SOURCES_LOOKED_AT:
                    break
                looked += 1
                if src is host:
                    continue
                cand = tails.get(src.id)
                if cand is None:
                    cand = tails[src.id] = self._tail_of(src)
                tid, rem, fin, ctx = cand
                if tid < 0 or fin <= dl or fin <= best_fin:
                    continue
                cost = self.view.cost
                move = cost.kv_move_s(ctx) if self._kv(tid, host, 0) else cost.reprefill_s(ctx, prog.f[host.id])
                gain = 0.05 * (fin - now)
                there = now + move + prog.time_left(tid, rem, now, host.id, 1, ctx)
                if fin - there <= gain:
                    continue
                if own is None:
                    own = [(r, self.remaining(r)) for r in host.active]
                for r, r_rem in own:  # the host's own trajectories, slowed by it
                    there = max(there, now + prog.time_left(r, r_rem, now, -1, 1, ctx))
                    if fin - there <= gain:
                        break  # (`there` only grows)
                if fin - there > gain:
                    best, best_fin = tid, fin
        if best < 0:
            return False
        self.move(best, host, 0)
        return True

    def _tail_of(self, src: InstView) -> tuple[int, float, float, float]:
        """`src`'s hosting candidate: the trajectory that has made the most tokens, its mean
        remainder, its predicted finish where it runs and its context; trajectory -1 if a
        trajectory is still in transit to `src`."""
        if not src.settled():
            return -1, 0.0, 0.0, 0.0
        now, prog = self.now, self.prog
        tid = prog.most_made(src.active, now)
        rem = self.remaining(tid)
        return tid, rem, now + prog.time_left(tid, rem, now), prog.plen[tid] + prog.generated(tid, now)

    def _consolidate(self, ver: int, latest: int, tools: bool = False) -> None:
        """Old-version instances with few trajectories (at most `repartition_load` of their slots),
        fewest first, move whole onto the busiest peer of their version on which every moved and
        resident trajectory is predicted to finish before the earliest time the trainer could need
        it (or, where data paces the trainer, no later than the two would drain anyway; where tool
        waits decide when the version ends, `_tool_bound`, before the version's own predicted last
        finish if that is later: `tools`); then load the newest."""
        if self.now < self._retry.get(ver, 0.0):
            return  # the last pass over this version found nothing to move: not again so soon
        old, share = self.old, self.dc.repartition_load
        now, prog, widen = self.now, self.prog, self._widen
        if widen:
            self._c = self.calib.factor(lambda t: prog.generated(t, now), now)
        dl = self.deadline(ver, paced=True)
        if tools:
            dl = max(dl, self._last_finish(ver))
        looked = 0
        for load in old.loads(ver):
            if load == 0:
                continue
            if load > share * self._cap_max or looked >= _SOURCES_LOOKED_AT:
                break
            for src in sorted(old.bucket(ver, load), key=lambda i: i.id):
                if load > share * src.max_seqs or not src.settled():
                    continue
                if not self.capacity_needed():
                    return
                looked += 1
                dst = self._safe_destination(ver, src, dl, tools)
                if dst is not None:
                    residents = dst.load + len(src.active) - 1
                    for tid in list(src.active):
                        if widen:
                            self._bet(tid, dl)
                        self.move(tid, dst, residents)
                    self.load(src, latest)
                    return  # one per call: the next finish or publication looks again
                if looked >= _SOURCES_LOOKED_AT:
                    break
        self._retry[ver] = self.now + _RETRY_S

    def _drain_s(self, inst: InstView, extra: list[tuple[float, float]] | None = None, bound: bool = False,
                 residents: bool = False, mean: bool = False) -> float:
        """Predicted seconds until `inst` holds nothing, were trajectories moved onto it (`extra`:
        their cautious remainders and contexts, `_remainders`): each runs its cautious remainder
        and then leaves the batch (`DecodeCost.drain_s`; `mean`: its own run their mean remainders);
        `residents`: until its own trajectories finish, slowed by the extra ones while they run."""
        own = inst.active
        if not own and (residents or not extra):
            return 0.0
        trajs = [(rem, ctx, True) for rem, ctx in self._remainders(own, bound, mean)]
        for rem, ctx in extra or []:
            trajs.append((rem, ctx, not residents))
        trajs.sort()
        return self.view.cost.drain_s(trajs, self.prog.f[inst.id])

    def _remainders(self, trajs: Iterable[int], bound: bool = False, mean: bool = False) -> list[tuple[float, float]]:
        """Each trajectory's cautious remainder (`remaining`; `mean`: its mean remainder) and its
        context now."""
        now, prog = self.now, self.prog
        plen = prog.plen
        return [(self.remaining(t, not mean, bound), plen[t] + prog.generated(t, now)) for t in trajs]

    def _reprefill_s(self, moved: list[int], ctxs: list[float], dst: InstView, residents: int) -> float:
        """Seconds by which `dst`'s decode steps grow to re-prefill the contexts (`ctxs`) of the
        `moved` trajectories that do not ship their KV cache there (decided as `move` does)."""
        f, reprefill = self.prog.f[dst.id], self.view.cost.reprefill_s
        if not (self.dc.migrate_kv and self.kv_migration):
            return reprefill(sum(ctxs), f)  # every one re-prefills
        return sum(reprefill(c, f) for t, c in zip(moved, ctxs) if not self._kv(t, dst, residents))

    def _safe_destination(self, ver: int, src: InstView, dl: float, tools: bool = False) -> InstView | None:
        """A peer of `ver` to take all of `src`'s trajectories, if one pays: the source's slots,
        free now instead of when it would drain, outweigh how much later the destination drains
        (slot-seconds for the newest version), and nothing is predicted to finish later than
        both `dl` and the later of the two instances' own predicted drains (`tools`: than `dl`,
        the version's own last finish). Busiest first."""
        now = self.now
        moved = list(src.active)
        m = len(moved)
        t_src = self._drain_s(src, None, True)
        rems = self._remainders(moved, True)  # (the same as t_src's, computed once for every destination)
        ctxs = [c for _, c in rems]
        mctx = sum(ctxs)
        looked = 0
        for load in reversed(self.old.loads(ver)):
            for p in self.old.bucket(ver, load):
                if p is src or load + m > p.max_seqs:
                    continue
                if looked >= _DESTINATIONS_LOOKED_AT:
                    return None
                looked += 1
                if self.prog.kv_held(p.id, now) + mctx > 0.9 * p.kv_tokens:
                    continue
                t_dst = self._drain_s(p, None, True)
                pre = self._reprefill_s(moved, ctxs, p, load + m - 1)
                merged = self._drain_s(p, rems, True) + pre  # the re-prefill stalls the destination's batch
                if merged - t_dst >= t_src * src.max_seqs / p.max_seqs:
                    continue  # the destination's slots would stand idle longer than the source's are freed
                if now + merged > dl and (tools or not self.data_bound() or merged > max(t_src, t_dst)):
                    continue  # late for the trainer (and, where data paces it, later than it would be anyway)
                if now + self._drain_s(p, rems, True, residents=True) + pre > max(dl, now + t_dst):
                    continue  # the destination's own trajectories, slowed by the moved ones, late for the trainer
                return p
        return None

    def _repartition_multi(self, old: list[InstView], latest: int) -> None:
        """versions_per_instance > 1: load the newest next to the old; evict versions with no work."""
        for inst in sorted(old, key=lambda i: (self.work_left(i), i.id)):
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
        self.pace.published(self.now)
        if self.lending is not None:
            self._lend_or_take_back()
        if self.cohorts is not None:
            self.cohorts.drop_before(version - self.eta - 2)
        self._incoming.clear()  # loads under way are of an older version now
        self._ready_at.clear()
        self._retry.clear()  # the deadlines moved
        self._shadow_bets()
        self.repartition()
        self.admit()

    def _lend_or_take_back(self) -> None:
        """The trainer is idle: lend drained instances to it, or take the lent ones back."""
        lending, f = self.lending, self.prog.speed
        assert lending is not None
        L, use = lending.length_stats()
        serving = [(i.id, i.devices, lending.rate(i.max_seqs, i.kv_tokens, f[i.id], L) if L > 0 else 0.0,
                    not i.active and i.loading < 0, i.max_seqs)
                   for i in self.view.instances.values() if i.alive and not i.elastic]
        lend, back = lending.plan(self.B * (self.G or 1), self.G or 1, serving, use)
        if back:
            self._take_all_back()
        if len(self.view.buffer) < self.B:
            return  # no batch to start now: the trainer is about to wait, lend nothing
        insts = self.view.instances
        for iid in lend:
            inst = insts[iid]
            self.lend(inst)
            lending.lent[iid] = inst.devices
            self._slots_total -= inst.max_seqs

    def _take_all_back(self) -> None:
        lending = self.lending
        assert lending is not None
        for iid in list(lending.lent):
            inst = self.view.instances[iid]
            self.take_back(inst)
            del lending.lent[iid]
            self._slots_total += inst.max_seqs

    def _shadow_bets(self) -> None:
        """Keep the calibration current whether or not consolidation acts: bet on the oldest
        trajectory of up to _SHADOW_BETS old-version instances, as if it were moved now."""
        if not self._widen:
            return
        calib, n = self.calib, 0
        for ver in self.old.versions():
            dl = self.deadline(ver, paced=True)
            for inst in self.old.members(ver):
                if n >= _SHADOW_BETS:
                    return
                if inst.active:
                    tid = min(inst.active)
                    if tid not in calib.open:
                        self._bet(tid, dl)
                        n += 1

    def _bet(self, traj: int, deadline: float) -> None:
        """Record that `traj` makes at most its cautious remainder (unwidened) by `deadline`."""
        self.calib.bet(traj, self.prog.generated(traj, self.now), self.remaining(traj, True, True, False), deadline)

    def after_finish(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        t = self.view.trajs[traj]
        self.prog.finish(traj, t.tokens, self.now)
        self.calib.settle(traj, t.tokens, self.now)
        if self.lending is not None:
            self.lending.finished(t.tokens, self.view.groups[t.prompt_id].prompt_len)
        if self.cohorts is not None:
            self.cohorts.finish(t.version, t.tokens)
        if group_done is not None:
            self._tick(1)
            if self.lending is not None:
                self.lending.group_done(group_done.version, self.now)
        pred = self.pred
        if pred is not None:
            pred.observe(t.prompt_id, t.tokens, inst.id, self.now - t.t_start)
            if group_done is not None:
                pred.forget(group_done.prompt_id)
        at = self.old.where.get(inst.id)
        if at is not None:
            if self.vpi > 1:
                self.repartition()
            elif inst.load == 0 or (self.dc.consolidate and inst.load <= self.dc.repartition_load * inst.max_seqs):
                self._repartition_version(at[0], self.view.latest_version)

    def after_aborts(self) -> None:
        self.repartition()

    def on_loaded(self, inst: InstView, version: int) -> None:
        self.prog.resume(inst.id, self.now)
        self._incoming.pop(inst.id, None)
        self._ready_at.pop(inst.id, None)
        # a load that a newer publication overtook leaves an old-version instance: repartition
        # its version now (nothing else would: no finish happens on a drained instance)
        at = self.old.where.get(inst.id)
        if at is not None and self.vpi == 1:
            self._repartition_version(at[0], self.view.latest_version)
        elif at is not None:
            self.repartition()
        self.admit()

    def on_instance_failed(self, inst: InstView, was_loading: int) -> None:
        self._incoming.pop(inst.id, None)
        self._ready_at.pop(inst.id, None)

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
        """The trainer waits for data: the instances lent to it come back; with an elastic
        trainer its devices take the new weights (an on-device reshard) and serve as rollout
        instances until the next step starts."""
        if self.lending is not None:
            self.lending.waiting()
            if self.lending.lent:
                self._take_all_back()
        if not self.dc.elastic_trainer:
            return
        latest = self.view.latest_version
        for inst in self._elastic:
            if inst.alive and inst.loading < 0 and not inst.active and latest not in inst.versions:
                self.load(inst, latest)

    def train_batch(self, batch: list[GroupView]) -> None:
        self._tick()
        self._vacate_elastic()
        self.pace.train_started(self.now)
        if self.lending is not None:
            v = self.view
            self.lending.step_started(sum(g.prompt_len * g.size + sum(v.trajs[t].tokens for t in v.group_trajs(g))
                                          for g in batch), v.trainer_version)
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
                    dst = max(peers, key=lambda i: (i.free_slots(), -i.id))
                    self.move(t.id, dst, dst.load)
                else:
                    g = self.view.groups[t.prompt_id]
                    self.regenerate(g, "elastic")

    def on_regenerate(self, g: GroupView) -> None:
        if self.pred is not None:
            self.pred.forget(g.prompt_id)
        super().on_regenerate(g)
