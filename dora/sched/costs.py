"""What the scheduler knows of a body's costs: the decode-step model, KV transfer, weight loads,
and the trainer's step model (`TrainCost`).

A decode step of an instance running n sequences that hold C context tokens between them takes

    f · (base + expert·(1 − (1 − touch)^n) + per_seq·n + per_ctx·C)   seconds,

the shape of the simulator's cost model (`dora.sim.cost`), with f the instance's speed factor.
The body gives the coefficients it knows (the simulator its cost model, the executor a
calibrated cost file) in `ClusterStarted`; f is not given: the scheduler learns it per
instance from the trajectories it sees finish (`dora.sched.progress`). Without coefficients the
defaults below stand in (an H800 pair serving a 30B-A3B MoE) and the learned f absorbs the
scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class DecodeCost:
    base_s: float = 0.002459  # per step: non-expert weights and step overhead
    expert_s: float = 0.010818  # reading every routed expert once (0 for dense models)
    touch: float = 0.0625  # share of experts one token uses
    per_seq_s: float = 1.0252e-5  # per running sequence per step
    per_ctx_s: float = 1.834e-8  # per context token per step
    prefill_per_token_s: float = 5.592e-6  # per prompt or re-prefilled token, inside the decode step
    kv_base_s: float = 0.005  # per migration with KV
    kv_per_token_s: float = 9.83e-7  # per context token moved
    weight_load_s: float = 1.1106  # one instance loads a version

    def weights_s(self, n: int) -> float:
        """Weight reads of one step over n sequences of one version."""
        if self.expert_s == 0.0 or n <= 0:
            return self.base_s
        return self.base_s + self.expert_s * (1.0 - (1.0 - self.touch) ** n)

    def step_s(self, n: int, ctx: float) -> float:
        """One step of n sequences holding `ctx` context tokens (f = 1)."""
        return self.weights_s(n) + self.per_seq_s * n + self.per_ctx_s * ctx

    def steps_in(self, dt: float, n: int, ctx: float, f: float) -> float:
        """Steps (fractional) done in `dt` seconds by n sequences starting with `ctx` context
        tokens: step k takes A + Bq·k with A = f·step_s(n, ctx), Bq = f·per_ctx·n (the context
        grows by n per step), so j steps take j·A + Bq·j(j−1)/2."""
        if n <= 0 or dt <= 0.0:
            return 0.0
        a = f * self.step_s(n, ctx)
        bq = f * self.per_ctx_s * n
        if bq <= 0.0:
            return dt / a
        lin = a - bq / 2.0
        return (-lin + math.sqrt(lin * lin + 2.0 * bq * dt)) / bq

    def time_for(self, tokens: float, n: int, ctx: float, f: float) -> float:
        """Seconds for `tokens` more steps of n sequences starting with `ctx` context tokens."""
        if tokens <= 0.0:
            return 0.0
        return f * (tokens * self.step_s(n, ctx) + self.per_ctx_s * n * tokens * (tokens - 1.0) / 2.0)

    def drain_s(self, trajs: list[tuple[float, float, bool]], f: float) -> float:
        """Seconds until the last counted trajectory of a batch finishes: `trajs` holds each
        one's (remaining tokens, context now, counted), sorted by remaining tokens. All decode
        together; each leaves the batch when its remainder is done, taking its context with it."""
        end = 0.0
        m = len(trajs)
        ctx = 0.0
        for rem, c, counted in trajs:
            ctx += c
            if counted and rem > end:
                end = rem
        done = secs = 0.0
        for rem, c, _ in trajs:
            d = rem - done
            if d > 0.0:
                secs += self.time_for(d, m, ctx, f)
                ctx += m * d
                done = rem
            if rem >= end:
                break
            m -= 1
            ctx -= c + rem
        return secs

    def kv_move_s(self, ctx: float) -> float:
        """Seconds the moved trajectory waits while its KV cache (ctx tokens) travels."""
        return self.kv_base_s + self.kv_per_token_s * ctx

    def reprefill_s(self, ctx: float, f: float) -> float:
        """Seconds a decode step of an instance with speed factor f grows by to prefill ctx tokens."""
        return f * self.prefill_per_token_s * ctx

    def kv_pays(self, ctx: float, n_dst: int, f_dst: float) -> bool:
        """Whether shipping the KV costs less than re-prefilling on the destination, counted in
        sequence-seconds: the transfer delays the moved trajectory alone; a re-prefill runs inside
        the destination's decode step, so it delays the moved one and its n_dst residents."""
        return self.kv_move_s(ctx) <= (n_dst + 1) * self.reprefill_s(ctx, f_dst)


@dataclass(slots=True)
class TrainCost:
    """The trainer's step model, as the body gives it: a step on T tokens over d devices takes
    base_s + device_s_per_token·T/d; publishing a version takes publish_s; changing the devices
    the trainer runs on (lending rollout instances to it or taking them back) stops it for
    resize_s before its next step (re-forming its data-parallel group and resharding its state)."""

    base_s: float
    device_s_per_token: float
    publish_s: float
    resize_s: float

    def step_s(self, tokens: float, devices: int) -> float:
        return self.base_s + self.device_s_per_token * tokens / devices
