"""A rollout instance: continuous batching with analytic jumps over decode steps.

The instance runs steps back to back. Membership only changes at step boundaries: a step
that starts at time T includes every sequence that arrived at or before T (and that fits:
free slot, free KV), as in vLLM's scheduler. Between membership changes the batch is fixed,
so with n sequences, context sum C at the start of a run and A = f*(W + b*n + c*C), where W
is the weight-read time summed over the versions present (CostModel.weights_s), the first j
steps of the run end at

    T(j) = T0 + E + j*A + f*c*n*j*(j-1)/2        (E: prefill of the sequences admitted at T0)

and the instance jumps straight to the next boundary where something happens: a sequence
finishes, the KV cache would overflow, or a requested change (arrival, abort, migration,
weight load) is due. In reference mode every run is one step long (one event per step);
both modes share this arithmetic, so they must agree to rounding.

Progress of a running sequence is lazy: it joined at instance step k0 with `remaining`
tokens to go, so it finishes at step k0 + remaining and has k - k0 tokens at step k.

Multi-turn trajectories (trace column `turns`): a trajectory of `turns` turns makes a tool call
after every turn but the last. With r tokens still to generate over t turns left, the current
turn generates r // t of them (the last turn: all r), so it leaves the batch at step k0 + r - rest,
`rest` being the tokens of its later turns. At the end of a turn it leaves the running batch (its
slot is free for others) but its KV stays allocated, pinned on the instance and counted in KV use
(`held`), while the tool call runs (`wait_s` seconds, outside the instance); it then joins the
back of the waiting queue, still pinned, with the tool's output (`tool` tokens) to prefill, and
runs its next turn once admitted (its context grown by the output). A pinned context is dropped
only under KV pressure, before any running sequence is preempted (the sequence whose tool call
ends last first), or when nothing runs and the head of the queue cannot fit: its owner then
re-prefills it on admission (a `preempt` row). Time in a tool call is no decode time: the
sequence's decode-slot share stops while it is out of the batch.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING, Callable

from dora.body import Tracked, load_row
from dora.sim.cost import CostModel
from dora.sim.order import ARRIVAL, REPLAN

if TYPE_CHECKING:
    from dora.eventlog import EventLog

# Seq states (TOOL: between turns, waiting for a tool call, its KV pinned on the instance)
WAITING, RUNNING, GONE, TOOL = 0, 1, 2, 3
# Finish heap entries are ints, (target step << _SHIFT) | traj: ordered as (target, traj) tuples
# would be, and cheaper to compare.
_SHIFT = 32
_MASK = (1 << _SHIFT) - 1
# kinds of stop request (Stop.kind)
ABORT, MIGRATE, INTERRUPT = 0, 1, 2


class Stop:
    """A pending stop request of a sequence: an abort (`reason`: the policy's), a migration (to
    instance `dst`, with its KV cache or re-prefilled there) or an interrupt (its instance swaps
    weights under it)."""

    __slots__ = ("kind", "reason", "dst", "kv")

    def __init__(self, kind: int, reason: str = "", dst: int = -1, kv: bool = False) -> None:
        self.kind = kind
        self.reason = reason
        self.dst = dst
        self.kv = kv


_INTERRUPTED = Stop(INTERRUPT)


class Seq(Tracked):
    """One trajectory segment on an instance: the body contract's `Tracked` record (ids,
    instance, version, segment start, tokens made, decode share, prefill) and this engine's
    state of it (simulator-side truth, incl. its true length)."""

    __slots__ = ("remaining", "ctx", "prefill", "k0", "target", "phi0", "state", "stop", "fresh",
                 "multi", "rest", "calls", "wait_s", "tool", "tool_end", "held")

    def __init__(self, traj: int, prompt_id: int, instance: int, version: int, remaining: int, ctx: int,
                 prefill: int, t_start: float, fresh: int = 0):
        self.traj = traj  # the Tracked fields, set here (no call to Tracked.__init__ on this hot path)
        self.prompt_id = prompt_id
        self.sample_idx = -1
        self.instance = instance
        self.version = version
        self.t_dispatch = t_start
        self.before = 0
        self.remaining = remaining  # tokens still to generate
        self.ctx = ctx  # tokens in context (KV) when (re)admitted
        self.prefill = prefill  # tokens to prefill on admission (0 when the KV came with it)
        self.k0 = 0
        self.target = 0
        self.phi0 = 0.0
        self.state = WAITING
        self.t_start = t_start
        self.made = 0  # tokens generated in this segment
        self.busy = 0.0  # decode-slot device-seconds in this segment
        self.prefill_s = 0.0  # device-seconds of first prefills (prompt, tool output; re-prefill is not counted)
        self.fresh = fresh  # tokens of the pending prefill prefilled for the first time (useful work)
        self.stop: Stop | None = None  # pending stop request
        # multi-turn trajectories (see the module docstring); a one-turn trajectory keeps the defaults
        self.multi = False  # more than one turn
        self.rest = 0  # tokens of the turns after the current one
        self.calls = 0  # tool calls still to make
        self.wait_s = 0.0  # seconds of each tool call
        self.tool = 0  # tool-output tokens appended by each call
        self.tool_end = -1.0  # end of the tool call under way (-1: none)
        self.held = 0  # KV tokens pinned on the instance while it is out of the batch

    def aborting(self) -> bool:
        stop = self.stop
        return stop is not None and stop.kind == ABORT

    def split_turns(self, turns: int, wait_s: float, tool: int) -> None:
        """Make this (fresh) trajectory one of `turns` turns with a tool call between turns."""
        self.multi = True
        self.calls = turns - 1
        self.wait_s = wait_s
        self.tool = tool
        self.rest = self.remaining - self.remaining // turns

    def carry(self, s: "Seq") -> None:
        """Take over the turn state of `s`, the segment this one continues."""
        self.multi = s.multi
        self.rest = s.rest
        self.calls = s.calls
        self.wait_s = s.wait_s
        self.tool = s.tool
        self.tool_end = s.tool_end

    def tool_output(self) -> None:
        """The tool call is back: its output joins the context (to prefill); the next turn starts."""
        self.tool_end = -1.0
        self.calls -= 1
        self.ctx += self.tool
        self.prefill += self.tool
        self.fresh += self.tool
        self.rest -= self.rest // (self.calls + 1) if self.calls else self.rest


class Instance:
    """Simulated rollout instance. The owning `Cluster` supplies scheduling and callbacks."""

    # slots: the boundary path reads and writes these attributes millions of times
    __slots__ = ("id", "max_seqs", "kv_tokens", "devices", "f", "log", "_schedule", "_on_finish", "_on_stopped",
                 "reference", "cost", "wtable", "b", "c", "p", "K", "T0", "phi_base", "E", "A", "Bq", "n", "C",
                 "vcount", "running", "waiting", "heap", "versions", "loading", "alive", "pending_t", "pending_j",
                 "token", "replan_at", "stops", "load_req", "on_loaded", "load_s", "load_time",
                 "reprefill_tokens", "in_process", "load_token", "load_fails", "pause_req", "on_staged", "f_next",
                 "schedule_boundary", "_boundary_cbs", "held", "tooling", "on_tool")

    def __init__(self, iid: int, max_seqs: int, kv_tokens: int, devices: int, cost: CostModel, slowdown: float,
                 log: "EventLog", schedule: Callable[[float, int, Callable[[object], None]], None],
                 schedule_boundary: Callable[[float, tuple, int], None],
                 on_finish: Callable[[Seq, "Instance", float], None], on_stopped: Callable[[Seq, "Instance"], None],
                 reference: bool = False, load_fails: Callable[[], bool] | None = None):
        self.id = iid
        self.max_seqs = max_seqs
        self.kv_tokens = kv_tokens
        self.devices = devices
        self.f = slowdown
        self.log = log
        self._schedule = schedule
        self._on_finish = on_finish
        self._on_stopped = on_stopped
        self.reference = reference
        self.cost = cost
        self.wtable = [cost.weights_s(k) for k in range(max_seqs + 1)]  # weight-read time by batch size
        self.b, self.c, self.p = cost.decode_per_seq_s, cost.decode_per_ctx_token_s, cost.prefill_per_token_s
        # run state (valid from T0 on)
        self.K = 0  # steps done at the start of the current run
        self.T0 = 0.0
        self.phi_base = 0.0  # per-slot decode share clock
        self.E = 0.0  # prefill seconds in the first step of the run
        self.A = 0.0
        self.Bq = 0.0
        self.n = 0
        self.C = 0  # context tokens of running seqs at T0
        self.vcount: dict[int, int] = {}
        self.running: dict[int, Seq] = {}
        self.waiting: deque[Seq] = deque()
        self.heap: list[int] = []  # (target step << _SHIFT) | traj
        self.versions: set[int] = set()
        self.loading = -1  # version being loaded, -1 if none
        self.alive = True
        self.pending_t = math.inf  # time of the scheduled boundary event
        self.pending_j = 0  # steps of the current run that end at pending_t
        self.token = 0  # invalidates superseded boundary events
        self.replan_at = math.nan  # time of a scheduled same-instant replan
        self.stops: list[Seq] = []  # seqs to stop at the next boundary
        self.load_req: tuple[int, str, int] | None = None  # (version, mode, evict) at next boundary
        self.on_loaded: Callable[[Instance, int, str], None] | None = None
        self.load_s = 0.0
        self.load_time: Callable[[int, int, float], float] = lambda iid, v, t: 0.0
        self.reprefill_tokens = 0
        self.in_process = False
        self.load_token = 0  # invalidates the end of a load cut short by a failure
        self.load_fails = load_fails  # draws whether a finished load failed (retried)
        self.pause_req: tuple[float, int] | None = None  # (seconds, version): broadcast barrier at next boundary
        self.on_staged: Callable[[Instance, int], None] | None = None
        self.on_tool: Callable[[Seq, Instance, int], None] | None = None  # tool call started (-1) / ended (output tokens)
        self.f_next = 0.0  # slowdown from the next run on (0: unchanged)
        # schedule_boundary(t, callbacks, tok): an event at t carrying `tok` whose callbacks are
        # `callbacks` (this instance's `_boundary_cbs`), ordered as kind BOUNDARY
        self.schedule_boundary = schedule_boundary
        self._boundary_cbs = (self._boundary,)
        self.held = 0  # KV tokens pinned by sequences out of the batch (tool calls, queued after one)
        self.tooling: dict[int, Seq] = {}  # sequences in a tool call, by trajectory

    # ---- closed form -------------------------------------------------------------------------
    def T(self, j: int) -> float:
        """Time at which the first j steps of the current run are done."""
        if j <= 0:
            return self.T0
        return self.T0 + self.E + j * self.A + self.Bq * (j * (j - 1) // 2)

    def phi(self, j: int) -> float:
        return self.phi_base + (j * self.A + self.Bq * (j * (j - 1) // 2)) / self.max_seqs

    def steps_by(self, now: float) -> int:
        """Smallest j >= 0 with T(j) >= now: the boundary a change at `now` waits for."""
        if now <= self.T0 or self.n == 0 or self.loading >= 0:
            return 0
        x = now - self.T0 - self.E
        if x <= self.A:
            return 1
        if self.Bq > 0:
            half = self.Bq / 2.0
            lin = self.A - half
            j = int(math.ceil((-lin + math.sqrt(lin * lin + 4.0 * half * x)) / (2.0 * half)))
        else:
            j = int(math.ceil(x / self.A))
        j = max(j, 1)
        while j > 1 and self.T(j - 1) >= now:
            j -= 1
        while self.T(j) < now:
            j += 1
        return j

    def kv_used(self, now: float) -> int:
        """KV-cache tokens held at `now` by the running sequences and pinned by those between
        turns (other waiting ones hold none yet)."""
        if not self.alive:
            return 0
        if self.n == 0 or self.loading >= 0 or now <= self.T0:
            return self.C + self.held
        j = min(self.steps_by(now), self.pending_j)
        if self.T(j) > now:
            j -= 1  # step j is still under way
        return self.C + self.held + self.n * j

    # ---- requests from the cluster -------------------------------------------------------------
    def submit(self, seq: Seq, now: float, front: bool = False) -> None:
        """Queue a sequence; it joins at the next step boundary at or after `now`."""
        seq.state = WAITING
        if front:
            self.waiting.appendleft(seq)
        else:
            self.waiting.append(seq)
        self.touch(now)

    def request_stop(self, seq: Seq, why: Stop, now: float) -> None:
        """Stop a sequence (abort / migrate / interrupt): at once if waiting, else at the next boundary."""
        if seq.state == WAITING or seq.state == TOOL:
            if seq.state == WAITING:
                self.waiting.remove(seq)
            else:
                del self.tooling[seq.traj]
            self.held -= seq.held  # (seq.held stays: the context it had pinned, for a migration)
            seq.state = GONE
            seq.stop = why
            self._on_stopped(seq, self)
            return
        if seq.stop is not None:
            if why.kind == ABORT:
                seq.stop = why  # an abort overrides a pending migration or interrupt
            return
        seq.stop = why
        if self.loading >= 0 or self.in_process:
            # paused for a load (already at a boundary) or inside boundary processing
            if self.loading >= 0:
                self._leave(seq)
                self._on_stopped(seq, self)
            else:
                self.stops.append(seq)
            return
        self.stops.append(seq)
        self.touch(now)

    def request_load(self, version: int, mode: str, evict: int, load_s: Callable[[int, int, float], float],
                     now: float) -> None:
        """Load `version` at the next boundary; load_s(instance, version, start) gives its duration."""
        self.load_req = (version, mode, evict)
        self.load_time = load_s
        self.touch(now)

    def request_slowdown(self, f: float, now: float) -> None:
        """A new slowdown factor, from the first step that starts at or after `now`."""
        self.f_next = f
        self.touch(now)

    def request_pause(self, dur: float, version: int, now: float) -> None:
        """Stop decoding at the next boundary for `dur` to receive `version` (broadcast barrier)."""
        self.pause_req = (dur, version)
        self.touch(now)

    def touch(self, now: float) -> None:
        """Make sure the instance re-plans at the first boundary at or after `now`."""
        if self.loading >= 0 or not self.alive or self.in_process:
            return  # the load's end or the boundary being processed re-plans anyway
        j = self.steps_by(now)
        if j == 0:
            # At a boundary right now: re-plan at this instant (after all boundary events at now).
            if self.replan_at != now:
                self.replan_at = now
                self._schedule(now, REPLAN, lambda _: self._replan())
            return
        t = self.T0 + self.E + j * self.A + self.Bq * (j * (j - 1) // 2)  # T(j), j >= 1
        if t < self.pending_t:
            tok = self.token = self.token + 1  # _arm(j, t)
            self.pending_t = t
            self.pending_j = j
            self.schedule_boundary(t, self._boundary_cbs, tok)

    def _arm(self, j: int, t: float) -> None:
        """Schedule the boundary after the first j steps of the current run (at time t = T(j))."""
        tok = self.token = self.token + 1
        self.pending_t = t
        self.pending_j = j
        self.schedule_boundary(t, self._boundary_cbs, tok)

    # ---- boundary processing -------------------------------------------------------------------
    def _advance_to(self, now: float) -> None:
        """Materialise the run up to the boundary at `now` (a boundary time of the run)."""
        if self.n == 0 or now <= self.T0:
            return
        j = self.steps_by(now)
        assert self.T(j) == now, "advance to a non-boundary time"
        self._advance(j, now)

    def _advance(self, j: int, now: float) -> None:
        """Materialise the first j steps of the run, which end at `now`."""
        self.phi_base = self.phi(j)
        self.K += j
        self.C += self.n * j
        self.T0 = now
        self.E = 0.0

    def _leave(self, s: Seq) -> None:
        """Remove a running seq at the current boundary K (run state already materialised)."""
        made = self.K - s.k0
        s.made += made
        s.remaining -= made
        s.busy += (self.phi_base - s.phi0) * self.devices
        self.C -= s.ctx + made
        s.ctx += made
        s.state = GONE
        del self.running[s.traj]
        self.n -= 1
        v = s.version
        left = self.vcount[v] - 1
        if left:
            self.vcount[v] = left
        else:
            del self.vcount[v]

    def _boundary(self, event) -> None:
        """The boundary armed with token `event.arg` is due (unless superseded since)."""
        if event.arg != self.token:
            return  # superseded
        now = self.pending_t
        self.pending_t = math.inf
        if self.n and now > self.T0:  # _advance(pending_j, now), inlined (hot path)
            j = self.pending_j
            self.phi_base += (j * self.A + self.Bq * (j * (j - 1) // 2)) / self.max_seqs
            self.K += j
            self.C += self.n * j
            self.T0 = now
            self.E = 0.0
        self._process(now)

    def _replan(self) -> None:
        now = self.replan_at
        self.replan_at = math.nan
        if self.loading >= 0 or not self.alive:
            return
        self.token += 1  # any armed boundary is re-derived below
        self.pending_t = math.inf
        self._advance_to(now)
        self._process(now)

    def _process(self, now: float) -> None:
        """At a boundary: finish, stop, preempt, load or admit; then arm the next boundary."""
        self.in_process = True
        heap = self.heap
        K = self.K
        bound = (K + 1) << _SHIFT  # entries below it have target <= K
        if heap and heap[0] < bound:
            done: list[Seq] = []
            running, heappop = self.running, heapq.heappop
            while heap and heap[0] < bound:
                key = heappop(heap)
                target, traj = key >> _SHIFT, key & _MASK
                s = running.get(traj)
                if s is not None and s.target == target:
                    self._leave(s)
                    done.append(s)
            for s in done:
                if s.calls:  # the end of a turn: a tool call follows
                    self._tool_call(s, now)
                    continue
                if s.stop is not None:
                    if s.stop.kind == ABORT:
                        self._on_stopped(s, self)  # aborted while its finish was being delivered
                        continue
                    s.stop = None
                self._on_finish(s, self, now)
        while self.stops:
            stops, self.stops = self.stops, []
            for s in stops:
                if s.state == RUNNING:
                    self._leave(s)
                    self._on_stopped(s, self)
        self.in_process = False
        if self.pause_req is not None:
            self._start_pause(now)
            return
        if self.load_req is not None:
            self._start_load(now)
            return
        self._plan(now)

    def _plan(self, now: float) -> None:
        """Admit waiting seqs, preempt on KV overflow, and arm the next boundary.
        (The hot path: `_admit`, `T` and `_arm` are inlined, with the same arithmetic.)"""
        self.T0 = now
        self.E = 0.0
        if self.f_next:
            self.f, self.f_next = self.f_next, 0.0
        # KV growth: the next step needs n more tokens of KV (pinned contexts go first).
        while self.n and self.C + self.held + self.n > self.kv_tokens:
            if not (self.held and self._unpin(now, None)):
                self._preempt(now)
        prefill = 0
        waiting = self.waiting
        heap, running = self.heap, self.running
        if waiting:
            ms, kv, versions, vcount, K, phi = self.max_seqs, self.kv_tokens, self.versions, self.vcount, \
                self.K, self.phi_base
            n, C, H = self.n, self.C, self.held
            skipped: list[Seq] = []
            while waiting and n < ms:
                s = waiting[0]
                v = s.version
                if v not in versions:
                    skipped.append(waiting.popleft())  # its version is not here (yet)
                    continue
                if C + H + s.ctx - s.held + n + 1 > kv:
                    # FCFS: head of line blocks, as in vLLM (with nothing running, contexts pinned
                    # by others give way rather than block it for ever)
                    if n or H == s.held or not self._unpin(now, s):
                        break
                    H = self.held
                    continue
                waiting.popleft()
                s.state = RUNNING  # _admit(s)
                s.k0 = K
                target = s.target = K + s.remaining - s.rest
                s.phi0 = phi
                running[s.traj] = s
                n += 1
                C += s.ctx
                vcount[v] = vcount.get(v, 0) + 1
                heapq.heappush(heap, (target << _SHIFT) | s.traj)
                if s.prefill:
                    prefill += s.prefill
                    if s.fresh:
                        s.prefill_s += self.f * self.p * s.fresh * self.devices
                        s.fresh = 0
                    s.prefill = 0
                if s.held:
                    H -= s.held
                    s.held = 0
            self.n, self.C, self.held = n, C, H
            if skipped:
                waiting.extendleft(reversed(skipped))
        n = self.n
        if n == 0:
            self.A = self.Bq = 0.0
            heap.clear()  # only stale entries left: drop them at once rather than pop by pop
            return
        f = self.f
        E = self.E = f * self.p * prefill
        if len(self.vcount) == 1:
            w = self.wtable[n]
        else:
            wt = self.wtable
            w = sum(wt[k] for k in self.vcount.values())
        C = self.C
        A = self.A = f * (w + self.b * n + self.c * C)
        Bq = self.Bq = f * self.c * n
        while True:  # drop stale heap tops (seqs that left early)
            key = heap[0]
            target, traj = key >> _SHIFT, key & _MASK
            top = running.get(traj)
            if top is not None and top.target == target:
                break
            heapq.heappop(heap)
        j = target - self.K
        j_kv = (self.kv_tokens - C - self.held) // n  # steps that fit in KV
        if 0 < j_kv < j:
            j = j_kv
        if self.reference or j < 1:
            j = 1
        # _arm(j, T(j))
        t = now + E + j * A + Bq * (j * (j - 1) // 2)
        tok = self.token = self.token + 1
        self.pending_t = t
        self.pending_j = j
        self.schedule_boundary(t, self._boundary_cbs, tok)

    def _admit(self, s: Seq) -> None:
        s.state = RUNNING
        s.k0 = self.K
        s.target = self.K + s.remaining - s.rest
        s.phi0 = self.phi_base
        self.running[s.traj] = s
        self.n += 1
        self.C += s.ctx
        self.vcount[s.version] = self.vcount.get(s.version, 0) + 1
        heapq.heappush(self.heap, (s.target << _SHIFT) | s.traj)

    def _preempt(self, now: float) -> None:
        """KV overflow: recompute-preempt the most recently admitted sequence (vLLM's policy)."""
        victim = max(self.running.values(), key=lambda s: (s.k0, s.traj))
        self._leave(victim)
        victim.prefill = victim.ctx
        self.reprefill_tokens += victim.ctx
        victim.state = WAITING
        self.waiting.appendleft(victim)
        self.log.add(now, "preempt", self.id, victim.traj, victim.prompt_id, victim.version, tokens=victim.ctx)

    # ---- tool calls (multi-turn trajectories) -------------------------------------------------
    def _tool_call(self, s: Seq, now: float) -> None:
        """`s` (out of the batch at this boundary) ended a turn: its tool call starts. A pending
        abort drops it; a pending migration moves it, the call going on meanwhile."""
        s.tool_end = now + s.wait_s
        if s.aborting():
            self._on_stopped(s, self)
            return
        self.log.add(now, "tool_start", self.id, s.traj, s.prompt_id, s.version, tokens=s.ctx, dur_s=s.wait_s)
        if s.stop is not None:
            self._on_stopped(s, self)  # a migration: the tool call goes on while it moves
        else:
            s.held = s.ctx
            self.wait_tool(s, now)
        if self.on_tool is not None:
            self.on_tool(s, self, -1)

    def wait_tool(self, s: Seq, now: float) -> None:
        """`s` waits here for its tool call (to s.tool_end), pinning s.held tokens of KV."""
        s.state = TOOL
        self.tooling[s.traj] = s
        if s.held:
            self.held += s.held
            if self.n:
                self.touch(now)  # KV use grew between boundaries: check it at the next one
        end = s.tool_end
        self._schedule(end, ARRIVAL, lambda _: self._tool_back(s, end))

    def _tool_back(self, s: Seq, now: float) -> None:
        if self.tooling.get(s.traj) is not s or s.tool_end != now:
            return  # it left meanwhile (abort, migration, failure)
        del self.tooling[s.traj]
        self.tool_returned(s, now)

    def tool_returned(self, s: Seq, now: float) -> None:
        """The tool call of `s` is back: its output joins the context and it queues for its next turn."""
        self.log.add(now, "tool_end", self.id, s.traj, s.prompt_id, s.version, tokens=s.tool, dur_s=s.wait_s)
        s.tool_output()
        self.submit(s, now)
        if self.on_tool is not None:
            self.on_tool(s, self, s.tool)

    def _unpin(self, now: float, keep: Seq | None) -> bool:
        """Free one pinned context (not `keep`'s): of the sequence whose tool call ends last, else
        of the queued one admitted last. Its owner re-prefills it when admitted."""
        victim: Seq | None = None
        for s in self.tooling.values():
            if s.held and s is not keep and (victim is None or (s.tool_end, s.traj) > (victim.tool_end, victim.traj)):
                victim = s
        if victim is None:
            for s in reversed(self.waiting):
                if s.held and s is not keep:
                    victim = s
                    break
        if victim is None:
            return False
        held = victim.held
        self.held -= held
        victim.held = 0
        victim.prefill += held
        self.reprefill_tokens += held
        self.log.add(now, "preempt", self.id, victim.traj, victim.prompt_id, victim.version, tokens=held,
                     detail="pinned context")
        return True

    # ---- weights ----------------------------------------------------------------------------
    def _start_load(self, now: float) -> None:
        req = self.load_req
        assert req is not None
        version, mode, evict = req
        self.load_req = None
        self.loading = version
        self.load_s = self.load_time(self.id, version, now)
        load_row(self.log, now, "load_start", self.id, version, mode)
        if mode == "interrupt":
            for s in list(self.running.values()):
                self._leave(s)
                s.stop = _INTERRUPTED
                self._on_stopped(s, self)
            self.heap.clear()  # nothing runs: every entry is stale
        self.T0 = now
        self.A = self.Bq = self.E = 0.0
        self._await_load(now + self.load_s, version, mode, evict)

    def _await_load(self, done_t: float, version: int, mode: str, evict: int) -> None:
        tok = self.load_token
        self._schedule(done_t, ARRIVAL, lambda _: self._end_load(tok, done_t, version, mode, evict))

    def _end_load(self, tok: int, now: float, version: int, mode: str, evict: int) -> None:
        if tok != self.load_token:
            return  # the instance failed during the load
        if self.load_fails is not None and self.load_fails():
            # the new weights did not arrive intact: nothing serves until the retry succeeds
            load_row(self.log, now, "load_fail", self.id, version, mode, self.load_s)
            self._await_load(now + self.load_s, version, mode, evict)
            return
        self.loading = -1
        if mode == "add":
            self.versions.add(version)
            if evict >= 0:
                self.versions.discard(evict)
        else:
            self.versions = {version}
        load_row(self.log, now, "load_end", self.id, version, mode, self.load_s)
        self.T0 = now
        if self.on_loaded is not None:
            self.on_loaded(self, version, mode)
        self._after_load(now)

    def _after_load(self, now: float) -> None:
        if self.loading >= 0:
            return
        if self.pause_req is not None:
            self._start_pause(now)
        elif self.load_req is not None:
            self._start_load(now)
        else:
            self.touch(now)

    def _start_pause(self, now: float) -> None:
        req = self.pause_req
        assert req is not None
        dur, version = req
        self.pause_req = None
        self.loading = version  # paused: nothing decodes, requests queue until the end
        load_row(self.log, now, "load_start", self.id, version, "broadcast")
        self.T0 = now
        self.A = self.Bq = self.E = 0.0
        tok = self.load_token
        done_t = now + dur
        self._schedule(done_t, ARRIVAL, lambda _: self._end_pause(tok, done_t, version, dur))

    def _end_pause(self, tok: int, now: float, version: int, dur: float) -> None:
        if tok != self.load_token:
            return  # the instance failed during the broadcast
        self.loading = -1
        load_row(self.log, now, "load_end", self.id, version, "broadcast", dur)
        self.T0 = now
        if self.on_staged is not None:
            self.on_staged(self, version)
        self._after_load(now)

    # ---- failures ---------------------------------------------------------------------------
    def fail(self, now: float) -> list[Seq]:
        """The instance dies at `now`. Returns every sequence on it, running ones holding the
        tokens of the decode steps completed by `now` (the step in progress is lost)."""
        if self.n and self.loading < 0 and now > self.T0:
            j = self.steps_by(now)
            if j and self.T(j) > now:
                j -= 1
            if j > 0:
                self._advance(j, self.T(j))
        lost = list(self.running.values())
        for s in lost:
            self._leave(s)
        lost.extend(self.waiting)
        lost.extend(self.tooling.values())
        for s in lost:
            s.state = GONE
        self.waiting.clear()
        self.tooling.clear()
        self.held = 0
        self.heap = []
        self.stops = []
        self.load_req = None
        self.pause_req = None
        self.loading = -1
        self.versions = set()
        self.alive = False
        self.token += 1
        self.load_token += 1
        self.pending_t = math.inf
        self.replan_at = math.nan
        self.T0 = now
        self.A = self.Bq = self.E = 0.0
        return lost

    def recover(self, now: float, version: int) -> None:
        """Back at `now`, empty, holding `version`."""
        self.alive = True
        self.versions = {version}
        self.T0 = now

    # ---- queries ----------------------------------------------------------------------------
    def progress(self, s: Seq, now: float) -> int:
        """Tokens generated so far in the segment (whole steps done by `now`)."""
        if s.state != RUNNING:
            return s.made
        j = self.steps_by(now)
        if self.T(j) > now:
            j -= 1
        return s.made + min(self.K + j, s.target) - s.k0
