"""Estimated decode progress of every running trajectory, from what the scheduler knows.

No body reports per-token progress. The scheduler knows which trajectories run where (it
placed them) and the decode-step model (`DecodeCost`), so it keeps, per instance, a clock of
the decode steps done so far: between two membership changes the batch is fixed, and
`DecodeCost.steps_in` turns the elapsed time into steps. A trajectory that joined at clock k0
with g0 tokens already made (carried by a migration) has made g0 + clock − k0 tokens.

The instance's speed factor f is learned: when a trajectory finishes, the body reports its
length; the steps the clock counted for it over the steps it really took is how much slower
(> 1) or faster than assumed the instance ran, and f moves by that ratio (a log-space step).
Trajectories finishing together each move f by the same ratio, so a burst of finishes compounds
one correction: where groups run in lockstep (short uniform lengths, 64 trajectories to an
instance) f overshoots and swings; unbounded, by factors up to 10^5 (docs/dora_policy.md).
`speed` is the same factor learned without that: each instance also keeps its clock in modelled
seconds (at f = 1) and in unpaused seconds, a finished trajectory's life in real over modelled
seconds, scaled by counted over real steps, is the factor it observed, and `speed` moves towards
that (finishes that observe the same factor leave it there). f stays within a factor F_MAX of
`speed`: the scale of a cost model far from the body (the executor passes none, and defaults
stand in) is `speed`'s to absorb, and f's swings stop at F_MAX of it. The clock and the
decisions run on f; lending (`dora.sched.lending`) reads `speed`.
A trajectory in a tool call (multi-turn; `tool_call` .. `tool_back`, from the body's tool-call
events) is out of the batch: it keeps the tokens it has made and does not count as decoding.

An update costs O(1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dora.sched.costs import DecodeCost


class Progress:
    LEARN = 0.3  # weight of one finish in the speed-factor average
    CLAMP = 2.0  # one finish moves f by at most this factor
    F_MAX = 4.0  # f stays within [speed / F_MAX, speed · F_MAX]

    def __init__(self, cost: DecodeCost) -> None:
        self.cost = cost
        # per instance (ids are dense)
        self.clock: list[float] = []  # decode steps done since the start
        self.t: list[float] = []  # time the clock was last brought up to date
        self.n: list[int] = []  # trajectories running
        self.ctx: list[float] = []  # their context tokens at `t`
        self.f: list[float] = []  # learned speed factor (seconds per modelled second)
        self.speed: list[float] = []  # the same, learned towards what each finish observed
        self.paused: list[bool] = []  # loading weights: no decode steps
        self.pinned: list[float] = []  # context tokens of the trajectories waiting here for a tool call
        self.tau: list[float] = []  # modelled seconds (f = 1) of decoding since the start
        self.run: list[float] = []  # seconds not paused since the start
        # per trajectory (ids are dense); inst -1 = not running
        self.inst: list[int] = []
        self.k0: list[float] = []
        self.g0: list[float] = []
        self.plen: list[int] = []
        self.park: list[int] = []  # instance where it waits for a tool call (-1: none); g0 holds what it made
        self.tau0: list[float] = []  # its instance's tau and run when it joined
        self.run0: list[float] = []

    def add_instance(self, iid: int) -> None:
        while len(self.clock) <= iid:
            self.clock.append(0.0)
            self.t.append(0.0)
            self.n.append(0)
            self.ctx.append(0.0)
            self.f.append(1.0)
            self.speed.append(1.0)
            self.paused.append(False)
            self.pinned.append(0.0)
            self.tau.append(0.0)
            self.run.append(0.0)

    # ---- clock --------------------------------------------------------------------------------
    def _steps(self, iid: int, now: float) -> float:
        if self.paused[iid]:
            return 0.0
        return self.cost.steps_in(now - self.t[iid], self.n[iid], self.ctx[iid], self.f[iid])

    def _advance(self, iid: int, now: float) -> None:
        if now > self.t[iid]:
            if not self.paused[iid]:
                dt = now - self.t[iid]
                self.tau[iid] += dt / self.f[iid]
                self.run[iid] += dt
                j = self.cost.steps_in(dt, self.n[iid], self.ctx[iid], self.f[iid])
                if j > 0.0:
                    self.clock[iid] += j
                    self.ctx[iid] += self.n[iid] * j
            self.t[iid] = now

    def pause(self, iid: int, now: float) -> None:
        self._advance(iid, now)
        self.paused[iid] = True

    def resume(self, iid: int, now: float) -> None:
        self._advance(iid, now)
        self.paused[iid] = False

    # ---- membership ---------------------------------------------------------------------------
    def join(self, traj: int, iid: int, plen: int, g0: float, now: float) -> None:
        while len(self.inst) <= traj:
            self.inst.append(-1)
            self.k0.append(0.0)
            self.g0.append(0.0)
            self.plen.append(0)
            self.park.append(-1)
            self.tau0.append(0.0)
            self.run0.append(0.0)
        self._advance(iid, now)
        self.inst[traj] = iid
        self.k0[traj] = self.clock[iid]
        self.tau0[traj] = self.tau[iid]
        self.run0[traj] = self.run[iid]
        self.g0[traj] = g0
        self.plen[traj] = plen
        self.n[iid] += 1
        self.ctx[iid] += plen + g0

    def leave(self, traj: int, now: float) -> float:
        """The trajectory stops running where it is; returns the tokens it has made."""
        iid = self.inst[traj]
        if iid < 0:
            if self.park[traj] >= 0:  # in a tool call
                self._unpark(traj)
                return self.g0[traj]
            return 0.0
        self._advance(iid, now)
        g = self.g0[traj] + self.clock[iid] - self.k0[traj]
        self.inst[traj] = -1
        self.n[iid] -= 1
        if self.n[iid] == 0:
            self.ctx[iid] = 0.0  # no drift from float sums
        else:
            self.ctx[iid] = max(self.ctx[iid] - (self.plen[traj] + g), 0.0)
        return g

    def move(self, traj: int, dst: int, now: float) -> None:
        """Migrated: it goes on at `dst` with the tokens it has."""
        if self.inst[traj] < 0:
            if self.park[traj] >= 0:  # it waits for its tool call there
                self._unpark(traj)
                self._park(traj, dst)
            return
        plen = self.plen[traj]
        g = self.leave(traj, now)
        self.join(traj, dst, plen, g, now)

    def finish(self, traj: int, tokens: int, now: float) -> None:
        """Finished with `tokens` in all: learn the instance's speed factor, then leave."""
        iid = self.inst[traj]
        if iid < 0:
            return
        self._advance(iid, now)
        counted = self.clock[iid] - self.k0[traj]
        real = tokens - self.g0[traj]
        if counted > 1.0 and real > 1.0:
            ratio = min(max(counted / real, 1.0 / self.CLAMP), self.CLAMP)
            w = self.LEARN * min(real / 256.0, 1.0)  # short segments say little
            s = self.speed[iid]
            modelled = self.tau[iid] - self.tau0[traj]
            if modelled > 0.0:
                seen = (self.run[iid] - self.run0[traj]) * counted / (modelled * real)  # the factor observed
                s *= math.exp(w * math.log(min(max(seen / s, 1.0 / self.CLAMP), self.CLAMP)))
                self.speed[iid] = s
            f = self.f[iid] * math.exp(w * math.log(ratio))
            self.f[iid] = min(max(f, s / self.F_MAX), s * self.F_MAX)
        self.leave(traj, now)

    def tool_call(self, traj: int, now: float) -> None:
        """The trajectory waits for a tool call: it stops decoding (and counting) where it is."""
        iid = self.inst[traj] if traj < len(self.inst) else -1
        if iid < 0:
            return
        self.g0[traj] = self.leave(traj, now)
        self._park(traj, iid)

    def tool_back(self, traj: int, tokens: int, now: float) -> None:
        """Its tool call ended: it decodes again where it waited, its context `tokens` longer."""
        if traj >= len(self.park) or self.park[traj] < 0:
            return
        iid = self._unpark(traj)
        self.join(traj, iid, self.plen[traj] + tokens, self.g0[traj], now)

    def _park(self, traj: int, iid: int) -> None:
        self.park[traj] = iid
        self.pinned[iid] += self.plen[traj] + self.g0[traj]

    def _unpark(self, traj: int) -> int:
        iid = self.park[traj]
        self.park[traj] = -1
        left = self.pinned[iid] - (self.plen[traj] + self.g0[traj])
        self.pinned[iid] = left if left > 0.5 else 0.0  # no drift from float sums
        return iid

    def where(self, traj: int) -> int:
        """Instance of a running or tool-waiting trajectory (-1: none)."""
        iid = self.inst[traj]
        return iid if iid >= 0 else self.park[traj]

    # ---- reads --------------------------------------------------------------------------------
    def generated(self, traj: int, now: float) -> float:
        iid = self.inst[traj]
        if iid < 0:
            return self.g0[traj] if self.park[traj] >= 0 else 0.0
        return self.g0[traj] + self.clock[iid] + self._steps(iid, now) - self.k0[traj]

    def most_made(self, trajs: Iterable[int], now: float) -> int:
        """Of `trajs` (ids; iteration order), the one that has made the most tokens, ties to the
        lowest id: `max(trajs, key=lambda t: (generated(t, now), -t))` with each instance's
        clock read once (the same sums, so the same floats); -1 if empty."""
        best, best_g = -1, 0.0
        at, clock, steps = -2, 0.0, 0.0
        for t in trajs:
            iid = self.inst[t]
            if iid < 0:
                g = self.g0[t] if self.park[t] >= 0 else 0.0
            else:
                if iid != at:
                    at, clock, steps = iid, self.clock[iid], self._steps(iid, now)
                g = self.g0[t] + clock + steps - self.k0[t]
            if best < 0 or g > best_g or (g == best_g and t < best):
                best, best_g = t, g
        return best

    def context(self, iid: int, now: float) -> float:
        """Context tokens held by the instance's running trajectories at `now`."""
        return self.ctx[iid] + self.n[iid] * self._steps(iid, now)

    def kv_held(self, iid: int, now: float) -> float:
        """KV tokens held on the instance: its running trajectories' context and the contexts
        pinned there by trajectories waiting for a tool call."""
        return self.context(iid, now) + self.pinned[iid]

    def time_left(self, traj: int, remaining: float, now: float, iid: int = -1, dn: int = 0,
                  dctx: float = 0.0) -> float:
        """Seconds for `remaining` more tokens of `traj` on `iid` (default: where it runs) with the
        batch as it is now (plus dn trajectories holding dctx context): the co-runners are
        assumed to stay, its own context grows."""
        if iid < 0:
            iid = self.where(traj)
        if iid < 0 or remaining <= 0.0:
            return 0.0
        cost, f = self.cost, self.f[iid]
        n = max(self.n[iid] + dn, 1)
        return f * (remaining * cost.step_s(n, self.context(iid, now) + dctx)
                    + cost.per_ctx_s * remaining * (remaining - 1.0) / 2.0)
