"""Does a ranking survive a wrong cost model? Rerun the ranked policies with groups of cost
coefficients scaled by 1 - s and 1 + s (s = 0.2 by default), one group at a time:

- rollout: the decode and prefill terms (how fast instances generate),
- training: the trainer step's fixed and per-token terms,
- weights: moving weights and KV (instance loads, reshard, publication, KV transfers).

Scaling rollout against training moves the balance every schedule is built on; scaling weight
movement prices the version switches and migrations that the streaming policies make. The
winner "holds" under a perturbation when it is still the fastest of the policies that keep
C1-C3 there.
"""

from __future__ import annotations

from dataclasses import replace

from dora.parallel import run_tasks
from dora.sim.config import SimConfig
from dora.sim.run import run_metrics
from dora.verdict import Sensitivity, broken, winner_of

GROUPS = {
    "rollout": ("decode_base_s", "decode_expert_s", "decode_per_seq_s", "decode_per_ctx_token_s",
                "prefill_per_token_s"),
    "training": ("train_base_s", "train_device_s_per_token"),
    "weights": ("weight_load_s", "colocated_reshard_s", "publish_s", "kv_transfer_base_s", "kv_transfer_per_token_s"),
}


def perturbations(cfg: SimConfig, spread: float) -> list[tuple[str, SimConfig]]:
    """(name, config) for each group scaled down and up by `spread`."""
    out = []
    for group, keys in GROUPS.items():
        for sign in (-1, 1):
            f = 1.0 + sign * spread
            cost = replace(cfg.cost, **{k: getattr(cfg.cost, k) * f for k in keys})
            out.append((f"{group} x{f:g}", replace(cfg, cost=cost)))
    return out


def check(cfgs: dict[str, SimConfig], winner: str, spread: float = 0.2, jobs: int = 1,
          ray_address: str | None = None, quiet: bool = False) -> Sensitivity:
    """Rerun each ranked policy (`cfgs`: policy -> the config it ran) under every perturbation;
    count the perturbations that keep `winner` the fastest."""
    policies = list(cfgs)
    per = {name: perturbations(c, spread) for name, c in cfgs.items()}
    names = [n for n, _ in per[policies[0]]]
    tasks = [(per[p][i][1], p) for i in range(len(names)) for p in policies]
    rates: list[dict[str, float]] = [{} for _ in names]
    for k, m in run_tasks(run_metrics, tasks, jobs, ray_address, desc="cost sensitivity", quiet=quiet):
        if not broken(m):
            rates[k // len(policies)][policies[k % len(policies)]] = m["e2e_samples_per_s"]
    flips = []
    for name, r in zip(names, rates):
        w = winner_of(r) if r else "none"
        if w != winner:
            flips.append((name, w))
    return Sensitivity(len(names) - len(flips), len(names), spread, flips)
