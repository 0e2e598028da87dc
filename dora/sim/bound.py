"""The bubble-free bound: throughput with every decode slot full all the time.

An instance with S slots always full runs steps of τ = f·(W(S) + b·S + c·S·ctx̄), where ctx̄ is
the token-weighted mean context of a trajectory (P + (L+1)/2 averaged over its tokens), and
pays f·p·P of prefill per trajectory. Over a long interval it completes

    S / (E[L]·τ + S·f·p·E[P])   trajectories per second,

with S = min(max_seqs, kv_tokens / ctx̄). The trainer, never waiting for data, consumes
B·G trajectories per train_s + publish_s. Disaggregated, the cluster can do no better than
the slower of the two; colocated (same devices, one after the other), the harmonic sum.
With lending (rollout instances training with the trainer between its steps, their number
changing over the run), a run spends shares of its time at splits k (the k slowest instances
lent): the best mix of splits. The bound is the best of the three for the same devices.

`eta_bound_samples_per_s` below is a different ceiling: a proof-backed bound for a finite run under
the staleness bound η (docs/eta_bound.md).
"""

from __future__ import annotations

import numpy as np

from dora.sim.cost import CostModel
from dora.trace import Trace


def trace_moments(trace: Trace) -> dict:
    L = trace.response_len.astype(np.float64)
    P = trace.prompt_len.astype(np.float64)
    if trace.turns is not None:
        # multi-turn: every tool call's output is prefilled and joins the context; a token sees
        # about half of a trajectory's tool output on average (calls spread evenly over its
        # tokens); tool waits leave slots empty, so the bound (slots always full) ignores them
        X = trace.tool_tokens_total().astype(np.float64)
        ctx_bar = float((L * (P + X / 2 + (L + 1) / 2)).sum() / L.sum())
        return {"mean_L": float(L.mean()), "mean_P": float((P + X).mean()), "ctx_bar": ctx_bar}
    ctx_bar = float((L * (P + (L + 1) / 2)).sum() / L.sum())
    return {"mean_L": float(L.mean()), "mean_P": float(P.mean()), "ctx_bar": ctx_bar}


def instance_rates(m: dict, cost: CostModel, max_seqs: int, kv_tokens: int, slowdowns: np.ndarray) -> np.ndarray:
    """Trajectories per second of each instance (one per slowdown) with full slots."""
    S = min(float(max_seqs), kv_tokens / m["ctx_bar"])
    S = max(S, 1.0)
    b, c, p = cost.decode_per_seq_s, cost.decode_per_ctx_token_s, cost.prefill_per_token_s
    tau = slowdowns * (cost.weights_s(int(S)) + b * S + c * S * m["ctx_bar"])
    return S / (m["mean_L"] * tau + S * slowdowns * p * m["mean_P"])


def rollout_rate(m: dict, cost: CostModel, max_seqs: int, kv_tokens: int, slowdowns: np.ndarray) -> float:
    """Trajectories per second of a set of instances (one per slowdown) with full slots."""
    return float(instance_rates(m, cost, max_seqs, kv_tokens, slowdowns).sum())


def best_mixture(r: np.ndarray, t: np.ndarray) -> float:
    """max over time-shares w of min(Σ w_k r_k, Σ w_k t_k): the best a run can do that spends a
    share w_k of its time at split k (rollout rate r_k, trainer rate t_k). The optimum is a split
    alone or a mix of two on either side of r = t, where the mix makes them equal."""
    g = r - t
    best = float(np.minimum(r, t).max())
    hi, lo = np.flatnonzero(g >= 0), np.flatnonzero(g < 0)
    if len(hi) and len(lo):
        gi, gj = g[hi][:, None], g[lo][None, :]
        lam = gi / (gi - gj)  # share of the second split that makes the mix's r and t equal
        best = max(best, float(((1 - lam) * r[hi][:, None] + lam * r[lo][None, :]).max()))
    return best


def trainer_rate(m: dict, cost: CostModel, batch_trajs: int, devices: int, publish: bool) -> float:
    tokens = batch_trajs * (m["mean_L"] + m["mean_P"])
    step = cost.train_s(int(tokens), devices) + (cost.publish_s if publish else 0.0)
    return batch_trajs / step


def bound_samples_per_s(trace: Trace, cost: CostModel, instances: int, devices_per_instance: int, max_seqs: int,
                        kv_tokens: int, trainer_devices: int, batch_trajs: int, slowdowns: np.ndarray) -> dict:
    m = trace_moments(trace)
    # disaggregated: `instances` rollout instances + trainer devices, overlapped
    r = rollout_rate(m, cost, max_seqs, kv_tokens, slowdowns[:instances])
    t = trainer_rate(m, cost, batch_trajs, trainer_devices, publish=True)
    disagg = min(r, t)
    # colocated: every device does rollout, then training, in turn
    extra = trainer_devices // devices_per_instance
    all_dev = instances * devices_per_instance + trainer_devices
    r_all = rollout_rate(m, cost, max_seqs, kv_tokens, slowdowns[: instances + extra])
    t_all = trainer_rate(m, cost, batch_trajs, all_dev, publish=False)
    coloc = 1.0 / (1.0 / r_all + 1.0 / t_all)
    # lending: k rollout instances (the slowest) train with the trainer, k changing over the run
    rates = np.sort(instance_rates(m, cost, max_seqs, kv_tokens, slowdowns[:instances]))
    r_k = rates.sum() - np.concatenate([[0.0], np.cumsum(rates)])
    t_k = np.array([trainer_rate(m, cost, batch_trajs, trainer_devices + k * devices_per_instance, publish=True)
                    for k in range(instances + 1)])
    lend = best_mixture(r_k, t_k)
    return {"bound_samples_per_s": max(disagg, coloc, lend), "bound_disaggregated": disagg, "bound_colocated": coloc,
            "bound_lending": lend, "bound_rollout_only": r, "bound_trainer_only": t, **m}


# ---- the η-aware bound (docs/eta_bound.md) ----------------------------------------------------------
#
# A lower bound T on P_N - P_1 (first to last publication) for any policy that keeps C2 and C3, starts
# groups in sampling order, each under the newest version, and never aborts or regenerates one; the
# bound on e2e_samples_per_s is (N - 1)·B·G / T. Notation and the argument: docs/eta_bound.md.


def _turn_terms(trace: Trace, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per trajectory, in `shape`: tool calls (turns - 1), seconds of each call, tool-output tokens
    of each call; zeros for a one-turn trace."""
    if trace.turns is None:
        z = np.zeros(shape)
        return z, z, z
    calls = trace.turns.reshape(shape).astype(np.float64) - 1.0
    wait = np.zeros(shape) if trace.tool_wait_s is None else trace.tool_wait_s.reshape(shape).astype(np.float64)
    tool = np.zeros(shape) if trace.tool_tokens is None else trace.tool_tokens.reshape(shape).astype(np.float64)
    return calls, wait, tool


def _attention(L: np.ndarray, P: np.ndarray, calls: np.ndarray, tool: np.ndarray) -> np.ndarray:
    """Context tokens a trajectory's L tokens see at least: P + j - 1 for its j-th token, plus the
    tool output of every call before it; each turn after the first sees at least one call's
    output, and those turns make L - floor(L / turns) tokens (the first turn makes floor(L / turns))."""
    later = np.where(calls > 0, L - np.floor(L / (calls + 1.0)), 0.0)
    return L * P + L * (L - 1) / 2 + tool * later


def _tail_s(L: np.ndarray, P: np.ndarray, cost: CostModel, f_min: float, calls: np.ndarray | None = None,
            wait: np.ndarray | None = None, tool: np.ndarray | None = None) -> np.ndarray:
    """Shortest possible life of a trajectory, first step to result at the policy: its L decode steps
    alone (batch 1, one version) on the fastest instance, its prompt's prefill (or, if it was moved
    with KV before any prefill, that transfer), the result's latency; a multi-turn one also waits
    out each of its `calls` tool calls (`wait` s each, outside any instance) and prefills each
    call's `tool` output tokens."""
    z = np.zeros_like(L)
    calls, wait, tool = (z if a is None else a for a in (calls, wait, tool))
    decode = L * (cost.weights_s(1) + cost.decode_per_seq_s) + cost.decode_per_ctx_token_s * _attention(L, P, calls,
                                                                                                         tool)
    first = np.minimum(f_min * cost.prefill_per_token_s * P, cost.kv_transfer_base_s + cost.kv_transfer_per_token_s * P)
    return f_min * decode + first + cost.request_latency_s + calls * (wait + f_min * cost.prefill_per_token_s * tool)


def _work_s(L: np.ndarray, P: np.ndarray, cost: CostModel, S: int, calls: np.ndarray | None = None,
            tool: np.ndarray | None = None) -> np.ndarray:
    """Instance-seconds (slowdown 1) a trajectory's decode steps cost it at least: each step's weight
    read shared by S = max_seqs sequences, its own per-sequence and attention terms (no prefill)."""
    z = np.zeros_like(L)
    calls, tool = (z if a is None else a for a in (calls, tool))
    return L * (cost.weights_s(S) / S + cost.decode_per_seq_s) + cost.decode_per_ctx_token_s * _attention(L, P, calls,
                                                                                                         tool)


def _spaced_max(vals: np.ndarray, gap: int) -> float:
    """Largest sum of `vals` over indices pairwise at least `gap` apart."""
    best = [0.0] * (len(vals) + 1)  # best[m]: over the first m indices
    for j, v in enumerate(vals):
        best[j + 1] = max(best[j], float(v) + best[max(j + 1 - gap, 0)])
    return best[-1]


def _lending_capacity(W: float, R: float, f_max: float, steps: int, cost: CostModel, trainer_devices: int, dpi: int,
                      instances: int, tok_total: float, tok_lo: float, tok_hi: float) -> float:
    """A lower bound on P_N - P_1 when rollout instances may be lent to the trainer
    (docs/eta_bound.md, "Lending"). With x_s devices lent for step s (whole instances) and step
    time dt_s = base + c·tok_s/(d + x_s):
        (i)  T >= Σ dt_s + steps·publish_s          (the steps run one after another)
        (ii) R·T >= W + Σ (x_s / dpi)·dt_s / f_max  (a lent instance generates nothing)
    so for every λ in [0, 1], T >= λ·(i) + (1 - λ)·(ii)/R, whose step terms are each at least
    φ(tok_s) = min over x of (λ + μx)(base + c·tok_s/(d + x)), μ = (1 - λ)/(dpi·f_max·R). φ is
    concave in tok_s, so over tokens in [tok_lo, tok_hi] summing to tok_total or more it is at
    least its chord. Returns the largest over a grid of λ (each is a bound)."""
    base, c, pub = cost.train_base_s, cost.train_device_s_per_token, cost.publish_s
    x = np.arange(instances + 1, dtype=np.float64) * dpi
    best = W / R  # λ = 0
    if steps <= 0:
        return best
    for lam in np.linspace(0.0, 1.0, 65)[1:]:
        mu = (1.0 - lam) / (dpi * f_max * R)

        def phi(tok: float) -> float:
            return float(((lam + mu * x) * (base + c * tok / (trainer_devices + x))).min())

        lo, hi = phi(tok_lo), phi(tok_hi)
        chord = steps * lo + ((hi - lo) * (tok_total - steps * tok_lo) / (tok_hi - tok_lo) if tok_hi > tok_lo else 0.0)
        best = max(best, lam * steps * pub + (1.0 - lam) * W / R + chord)
    return best


def eta_bound_samples_per_s(trace: Trace, cost: CostModel, instances: int, devices_per_instance: int, max_seqs: int,
                            kv_tokens: int, trainer_devices: int, batch_size: int, eta: int, steps: int,
                            slowdowns: np.ndarray) -> dict:
    """Upper bound on e2e_samples_per_s of an N-step run under staleness η (docs/eta_bound.md).

    slowdowns: per instance as simulate() draws them (MoE imbalance x stragglers): the `instances`
    rollout instances, then the trainer_devices // devices_per_instance the trainer's devices hold.
    Besides the bound for any schedule (the best of the disaggregated placement, with an elastic
    trainer's instances, the colocated one and lending), the bound of each placement on its own:
    `eta_bound_rollout_only` (disaggregated, the trainer's devices only train), `eta_bound_disaggregated`
    (their instances generating while it waits), `eta_bound_colocated`, `eta_bound_lending`
    (disaggregated, rollout instances lent to the trainer between its steps)."""
    B, N, G, n = batch_size, steps, trace.group_size, trace.num_groups
    on_trainer = trainer_devices // devices_per_instance
    f = np.asarray(slowdowns[: instances + on_trainer], dtype=np.float64)
    f_min = float(f.min())
    L = trace.response_len.reshape(n, G).astype(np.float64)
    P = trace.prompt_len.reshape(n, G).astype(np.float64)
    # per trace group: slowest sample alone, decode work, trained tokens
    calls, wait, tool = _turn_terms(trace, (n, G))
    f_min_r = float(f[:instances].min())  # the fastest rollout instance (no trainer devices generating)
    tail = _tail_s(L, P, cost, f_min, calls, wait, tool).max(axis=1)
    tail_r = tail if f_min_r == f_min else _tail_s(L, P, cost, f_min_r, calls, wait, tool).max(axis=1)
    work = _work_s(L, P, cost, max_seqs, calls, tool).sum(axis=1)
    tokens = (L + P).sum(axis=1)

    # group k is the dataset's k-th draw (trace row k mod n), in block k // B. Steps 1..N-1 can train
    # only blocks 1-η..N-1+η; blocks 1+η..N-1-η they must train, from versions >= 1 (`forced`)
    k = np.arange(max(1 - eta, 0) * B, (N + eta) * B)
    block, rows = k // B, k % n
    forced = (block >= 1 + eta) & (block <= N - 1 - eta)

    def least(x: np.ndarray, count: int, pool: np.ndarray) -> float:
        """Sum of x over the forced groups and the cheapest others of `pool`, `count` groups in all."""
        rest = np.sort(x[pool & ~forced])[: max(count - int(forced.sum()), 0)]
        return float(x[forced].sum() + rest.sum())

    tok = tokens[rows]
    tok_min = least(tok, (N - 1) * B, np.ones(len(k), bool))  # tokens trained by steps 1..N-1
    tok_sorted = np.sort(tok)
    tok_step_min, tok_step_max = float(tok_sorted[:B].sum()), float(tok_sorted[-B:].sum())  # one step's batch
    W = least(work[rows], max(N - 1 - eta, 0) * B, block >= 1)  # rollout work inside [P_1, P_N]
    block_tail = tail[rows[forced]].reshape(-1, B).max(axis=1)
    block_tail_r = tail_r[rows[forced]].reshape(-1, B).max(axis=1)
    host = cost.host_factor(instances + on_trainer + 1)  # a shared host slows a trainer step by at most this

    def train_tail(devices: int, publish: float, load: float, tails: np.ndarray) -> tuple[float, float]:
        """(sum of the N-1 gaps' train + publish, a lower bound on P_N - P_1 from it and the tails)."""
        def step(tokens: float) -> float:
            return cost.train_base_s + cost.train_device_s_per_token * tokens / devices

        trained = (N - 1) * (step(0.0) + publish) + cost.train_device_s_per_token * tok_min / devices
        x_min = step(tok_step_min) + publish  # one gap's train + publish at least
        x_max = step(tok_step_max) * host + publish  # ... and at most
        gap = 2 * eta + 1
        by_sum = trained + _spaced_max(np.maximum(load + tails - eta * x_max, 0.0), gap)
        by_min = (N - 1) * x_min + _spaced_max(np.maximum(load + tails - eta * x_min, 0.0), gap)
        return trained, max(by_sum, by_min)

    # disaggregated: trainer devices apart; instances on them (elastic) generate only while it waits
    R_r, R_t = float((1.0 / f[:instances]).sum()), float((1.0 / f[instances:]).sum())
    trained_d, tt_d = train_tail(trainer_devices, cost.publish_s, min(cost.weight_load_s, cost.colocated_reshard_s),
                                 block_tail)
    straddle = (N - 1) * on_trainer * (cost.weights_s(max_seqs) + cost.decode_per_seq_s * max_seqs
                                       + cost.decode_per_ctx_token_s * kv_tokens)
    cap_d = max(W, W - straddle + R_t * trained_d) / (R_r + R_t)
    # colocated: every device generates, then trains (no publication; a reshard before generating)
    all_devices = (instances + on_trainer) * devices_per_instance
    trained_c, tt_c = train_tail(all_devices, 0.0, cost.colocated_reshard_s, block_tail)
    cap_c = W / (R_r + R_t) + trained_c
    # disaggregated, the trainer's devices only train: the rollout instances alone generate, and each
    # loads a new version by weight_load_s at least (no on-device reshard)
    _, tt_r = train_tail(trainer_devices, cost.publish_s, cost.weight_load_s, block_tail_r)
    cap_r = W / R_r
    # lending: rollout instances may train with the trainer (whole instances, any number, step by
    # step); a step is no shorter than on every device, and the time an instance is lent it
    # generates nothing
    lend_devices = trainer_devices + instances * devices_per_instance
    _, tt_l = train_tail(lend_devices, cost.publish_s, min(cost.weight_load_s, cost.colocated_reshard_s),
                         block_tail_r)
    cap_l = _lending_capacity(W, R_r, float(f[:instances].max()), N - 1, cost, trainer_devices, devices_per_instance,
                              instances, tok_min, tok_step_min, tok_step_max)
    T_d, T_c, T_r, T_l = max(tt_d, cap_d), max(tt_c, cap_c), max(tt_r, cap_r), max(tt_l, cap_l)
    samples = (N - 1) * B * G

    def rate(T: float) -> float:
        return samples / T if T > 0 else float("inf")

    return {"eta_bound_samples_per_s": rate(min(T_d, T_c, T_l)), "eta_bound_disaggregated": rate(T_d),
            "eta_bound_colocated": rate(T_c), "eta_bound_lending": rate(T_l),
            "eta_T_trainer_tail_lending_s": tt_l, "eta_T_capacity_lending_s": cap_l,
            "eta_T_trainer_tail_disaggregated_s": tt_d,
            "eta_T_capacity_disaggregated_s": cap_d, "eta_T_trainer_tail_colocated_s": tt_c,
            "eta_T_capacity_colocated_s": cap_c, "eta_bound_rollout_only": rate(T_r),
            "eta_T_trainer_tail_rollout_only_s": tt_r, "eta_T_capacity_rollout_only_s": cap_r,
            "eta_rollout_work_s": W, "eta_f_min": f_min}
