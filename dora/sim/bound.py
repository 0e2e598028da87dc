"""The bubble-free bound: throughput with every decode slot full all the time.

An instance with S slots always full runs steps of τ = f·(W(S) + b·S + c·S·ctx̄), where ctx̄ is
the token-weighted mean context of a trajectory (P + (L+1)/2 averaged over its tokens), and
pays f·p·P of prefill per trajectory. Over a long interval it completes

    S / (E[L]·τ + S·f·p·E[P])   trajectories per second,

with S = min(max_seqs, kv_tokens / ctx̄). The trainer, never waiting for data, consumes
B·G trajectories per train_s + publish_s. Disaggregated, the cluster can do no better than
the slower of the two; colocated (same devices, one after the other), the harmonic sum.
The bound is the better of the two placements for the same devices.
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


def rollout_rate(m: dict, cost: CostModel, max_seqs: int, kv_tokens: int, slowdowns: np.ndarray) -> float:
    """Trajectories per second of a set of instances (one per slowdown) with full slots."""
    S = min(float(max_seqs), kv_tokens / m["ctx_bar"])
    S = max(S, 1.0)
    b, c, p = cost.decode_per_seq_s, cost.decode_per_ctx_token_s, cost.prefill_per_token_s
    tau = slowdowns * (cost.weights_s(int(S)) + b * S + c * S * m["ctx_bar"])
    return float((S / (m["mean_L"] * tau + S * slowdowns * p * m["mean_P"])).sum())


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
    return {"bound_samples_per_s": max(disagg, coloc), "bound_disaggregated": disagg, "bound_colocated": coloc,
            "bound_rollout_only": r, "bound_trainer_only": t, **m}
