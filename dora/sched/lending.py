"""Lending rollout instances to the trainer while training sets the pace (dora's `lend_trainer`).

Where the trainer, not the data, paces a run (a full batch waits at every publication), rollout
instances stand drained for part of every step. Lent to the trainer, their devices shorten its
steps: a step on T tokens over d devices takes base + c·T/d (`TrainCost`, as the body gives it).
`Lending` decides at each publication which instances the trainer holds, from what the
scheduler observes:

- the pace (`TrainerPace`): at each step start, how long the trainer waited since the last
  publication, against the step before;
- the tokens each step trained (its groups' prompts and responses);
- each step's deadline slack: how long before the step started the last group of the version it
  must take last (its version − η) completed. Steps shorter by Δ each bring that deadline η·Δ
  closer, so a step may shrink by at most the least slack of the latest `_SLACKS` steps over η:
  beyond it the tails, not the trainer, pace the run (on light_tail at 64 instances with light
  load the trainer's batch was always there, yet groups at their deadline held the lent steps);
- the rollout's capacity: an instance with S slots full completes S / (f·(L̄·step(S) + S·p·P̄))
  trajectories a second (`DecodeCost`; f its learned speed, `Progress.speed`; L̄ and P̄ the mean response and prompt
  of the trajectories finished lately; S its slots, or what its KV cache holds at that context).

It lends drained instances, slowest first, when no step waited over the last `_CALM` steps, a
step has met a deadline (η steps into the run), the instances left still make a batch at least
as fast as the trainer trains it on the larger device count, and the time the steps save over
the next `_HORIZON` steps, no more than the slack allows each, exceeds the resize twice (now, and
when it takes them back); it lends no more instances than reach the slack's limit. The
instances' capacity counts their slots as full for a share L̄ / L₉₀ of the time (the mean over
the 90th percentile of the lengths finished lately: a slot whose trajectory ends early stands
empty until its batch's longer ones end). It takes every lent
instance back as soon as the trainer waits for data (`waiting`, at once) or a step waited longer
than `_WAIT_SHARE` of the step before it: what it observes, not its estimate, which moves with the
speeds it learns (a take-back on the estimate alone returned instances the trainer had not yet
missed); after that it lends none for `_COOLDOWN` steps. The instances left keep the slots of one
group at least.
"""

from __future__ import annotations

from dora.sched.costs import DecodeCost, TrainCost
from dora.sched.pace import TrainerPace

_CALM = 2  # steps without a wait before lending
_HORIZON = 8  # steps over which a lending's saving must repay its two resizes
_WAIT_SHARE = 0.05  # a wait longer than this share of a step takes the lent instances back
_COOLDOWN = 4  # steps after a take-back without lending
_ALPHA = 0.002  # weight of one finished trajectory in the running mean prompt
_LENGTHS = 2048  # finished lengths kept (the latest)
_SLACKS = 16  # steps whose deadline slack is kept (the latest)


class Lending:
    def __init__(self, cost: DecodeCost, train: TrainCost, trainer_devices: int, pace: TrainerPace) -> None:
        self.cost = cost
        self.train = train
        self.pace = pace  # the policy's, kept current by it
        self.trainer_devices = trainer_devices
        self.lent: dict[int, int] = {}  # lent instance -> its devices
        self.lengths: list[int] = []  # the latest finished response lengths (a ring)
        self._next = 0  # where the next one goes
        self.mean_P = 0.0  # running mean prompt length of finished trajectories
        self.tokens = 0.0  # trained tokens of the last step
        self.calm = 0  # steps started in a row without a wait
        self.cooldown = 0  # steps left without lending
        self.done_at: dict[int, float] = {}  # version -> when its last group so far completed
        self.slacks: list[float] = []  # the latest steps' deadline slacks (seconds)

    # ---- observations ------------------------------------------------------------------------------
    def finished(self, response: int, prompt: int) -> None:
        if len(self.lengths) < _LENGTHS:
            self.lengths.append(response)
        else:
            self.lengths[self._next] = response
        self._next = (self._next + 1) % _LENGTHS
        self.mean_P = float(prompt) if self.mean_P == 0.0 else self.mean_P + _ALPHA * (prompt - self.mean_P)

    def group_done(self, version: int, now: float) -> None:
        """A group of `version` completed."""
        self.done_at[version] = now

    def step_started(self, tokens: float, version: int) -> None:
        """A trainer step starts (at `pace.t0`: after the pace saw it start) on `tokens` trained
        tokens, training `version`. The groups of `version` − η are at their last step: how long
        before the start the last of them completed is the step's deadline slack."""
        self.tokens = tokens
        last = version - self.pace.eta
        if last in self.done_at:
            self.slacks.append(max(self.pace.t0 - self.done_at.pop(last), 0.0))
            del self.slacks[:-_SLACKS]
        for old in [v for v in self.done_at if v < last]:
            del self.done_at[old]
        wait = self.pace.waited_s
        if wait < 0.0:
            return  # the first step waits for the first batch
        if wait > _WAIT_SHARE * max(self.pace.last_train_s, 1e-9):
            self.calm = 0
        else:
            self.calm += 1
        if self.cooldown > 0:
            self.cooldown -= 1

    def waiting(self) -> None:
        """The trainer found no batch at a publication: it waits for data now."""
        self.calm = 0
        if self.lent:
            self.cooldown = _COOLDOWN

    # ---- predictions -------------------------------------------------------------------------------
    def devices(self) -> int:
        """Devices the trainer trains on now."""
        return self.trainer_devices + sum(self.lent.values())

    def step_s(self, devices: int) -> float:
        """Predicted step, start to publication, on `devices` (the last step's tokens)."""
        return self.train.step_s(self.tokens, devices) + self.train.publish_s

    def length_stats(self) -> tuple[float, float]:
        """(mean, share of time a slot is full: mean / 90th percentile) of the latest lengths."""
        ls = sorted(self.lengths)
        if not ls:
            return 0.0, 0.0
        mean = sum(ls) / len(ls)
        return mean, min(mean / max(ls[int(0.9 * (len(ls) - 1))], 1), 1.0)

    def rate(self, max_seqs: int, kv_tokens: int, f: float, L: float) -> float:
        """Trajectories a second one instance completes with its slots full (mean length L)."""
        P = self.mean_P
        ctx = P + L / 2.0
        S = max(min(float(max_seqs), kv_tokens / max(ctx, 1.0)), 1.0)
        c = self.cost
        per_traj = L * c.step_s(int(S), S * ctx) + S * c.prefill_per_token_s * P
        return S / (f * max(per_traj, 1e-12))

    # ---- the decision ------------------------------------------------------------------------------
    def plan(self, batch_trajs: int, group: int, serving: list[tuple[int, int, float, bool, int]],
             use: float) -> tuple[list[int], bool]:
        """At a publication (trainer idle): (instances to lend, take every lent one back).

        `serving`: the rollout instances not lent, as (id, devices, rate, drained, slots) with
        `rate` from `rate()`; `use`: the share of their full-slot rate counted on (`length_stats`);
        `batch_trajs`: trajectories a step trains (B·G); those left keep `group` (G) slots at least."""
        d = self.devices()
        if self.lent and self.calm == 0:
            self.cooldown = _COOLDOWN
            return [], True
        if self.calm < _CALM or self.cooldown > 0 or use <= 0.0 or self.tokens == 0.0:
            return [], False
        capacity = use * sum(x[2] for x in serving)
        slots = sum(x[4] for x in serving)
        if not self.slacks:
            return [], False  # no step has met a deadline yet
        now_s = self.step_s(d)
        floor = now_s - min(self.slacks) / max(self.pace.eta, 1)  # shorter steps bring late groups
        take: list[int] = []
        best = now_s
        for iid, dev, r, drained, n in sorted(serving, key=lambda x: x[2]):  # slowest first
            if not drained:
                continue
            if best <= floor:
                break  # the tails pace the steps from here: more devices save nothing
            capacity -= use * r
            d += dev
            slots -= n
            if capacity * self.step_s(d) < batch_trajs or slots < group:
                break
            take.append(iid)
            best = self.step_s(d)
        if not take or (now_s - max(best, floor)) * _HORIZON <= 2.0 * self.train.resize_s:
            return [], False
        return take, False
