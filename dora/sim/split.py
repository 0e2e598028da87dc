"""How N devices split between rollout and training, per policy, and the search for each
policy's best split (`--gpus N`; `python -m dora.sim plan` prints the search).

- colocated sync (verl's hybrid engine): every device generates, then every device trains;
  there is no split to choose (N / devices_per_instance instances, training on all N);
- every disaggregated policy: T trainer devices and (N - T) / devices_per_instance rollout
  instances, T searched: a coarse pass over T = N/K, 2N/K, ..., (K-1)N/K (K = `--splits`, 8 by
  default), then the midpoints on either side of the best (rounded so the rollout devices
  fill whole instances).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dora.errors import InputError
from dora.parallel import run_tasks
from dora.sim.config import SimConfig
from dora.sim.run import make_policy, run_metrics
from dora.trace import Trace
from dora.verdict import broken

COARSE = 8  # default: trainer shares k/8, k = 1..7


@dataclass(frozen=True)
class Split:
    instances: int  # rollout instances
    trainer_devices: int
    colocated: bool

    def label(self, dpi: int) -> str:
        if self.colocated:  # the trainer's devices are rollout instances too (dora.sim.run.simulate)
            n = self.instances + self.trainer_devices // dpi
            return f"colocated on all {n * dpi} devices ({n} instances of {dpi})"
        return f"{self.instances} x {dpi} rollout + {self.trainer_devices} trainer devices"


def check_gpus(gpus: int, dpi: int) -> None:
    if gpus < 2 * dpi:
        raise InputError(f"--gpus {gpus}: needs at least 2 x {dpi} devices (one {dpi}-device rollout instance and "
                         "the trainer); raise --gpus or lower --devices-per-instance")
    if gpus % dpi:
        raise InputError(f"--gpus {gpus}: not a multiple of the {dpi} devices per rollout instance; use "
                         f"{gpus - gpus % dpi} or {gpus - gpus % dpi + dpi}")


def trainer_options(gpus: int, dpi: int, splits: int = COARSE) -> list[int]:
    """Trainer device counts T = k/splits of N (k = 1 .. splits-1), each rounded so that N - T fills
    whole rollout instances; distinct, ascending."""
    out = []
    for k in range(1, splits):
        inst = round(gpus * (splits - k) / splits / dpi)
        inst = min(max(inst, 1), gpus // dpi - 1)
        out.append(gpus - inst * dpi)
    return sorted(set(out))


def refine(best: int, tried: list[int], gpus: int, dpi: int) -> list[int]:
    """Midpoints between the best T and its neighbours (past the ends: the fewest trainer devices,
    1, and the most, N - devices_per_instance), not tried yet."""
    ends = [1] + tried + [gpus - dpi]
    i = ends.index(best, 1)
    out = []
    for j in (i - 1, i + 1):
        inst = round((gpus - (best + ends[j]) / 2) / dpi)
        t = gpus - inst * dpi
        if t not in tried and 1 <= t <= gpus - dpi:
            out.append(t)
    return sorted(set(out))


def config_for(cfg: SimConfig, split: Split) -> SimConfig:
    return replace(cfg, cluster=replace(cfg.cluster, instances=split.instances,
                                        trainer_devices=split.trainer_devices))


def colocated(name: str, cfg: SimConfig, trace: Trace) -> bool:
    return make_policy(name, cfg, trace.group_size).placement == "colocated"


def search(cfg: SimConfig, trace: Trace, gpus: int, splits: int = COARSE, jobs: int = 1,
           ray_address: str | None = None, quiet: bool = False) -> tuple[dict[str, Split], list[dict]]:
    """Each policy's best split, and every run of the search as a row
    {policy, instances, trainer_devices, colocated, e2e_samples_per_s, broken}."""
    dpi = cfg.cluster.devices_per_instance
    check_gpus(gpus, dpi)
    G = trace.group_size
    options = [t for t in trainer_options(gpus, dpi, splits) if (gpus - t) // dpi * cfg.cluster.max_seqs >= G]
    if not options:
        raise InputError(f"--gpus {gpus}: no split leaves enough rollout instances for one group of {G} samples at "
                         f"{cfg.cluster.max_seqs} decode slots each; raise --gpus or --max-seqs")
    rows: list[dict] = []

    def run(pairs: list[tuple[str, Split]], desc: str) -> None:
        tasks = [(config_for(cfg, s), name) for name, s in pairs]
        for k, m in run_tasks(run_metrics, tasks, jobs, ray_address, desc=desc, quiet=quiet):
            name, s = pairs[k]
            rows.append({"policy": name, "instances": s.instances, "trainer_devices": s.trainer_devices,
                         "colocated": s.colocated, "e2e_samples_per_s": m["e2e_samples_per_s"],
                         "broken": "/".join(broken(m)), "metrics": m})

    coloc = {p: colocated(p, cfg, trace) for p in cfg.policies}
    first: list[tuple[str, Split]] = []
    for p in cfg.policies:
        if coloc[p]:
            first.append((p, Split(gpus // dpi - 1, dpi, True)))
        else:
            first += [(p, Split((gpus - t) // dpi, t, False)) for t in options]
    run(first, f"splits of {gpus} devices")
    second = []
    for p in cfg.policies:
        if not coloc[p]:
            best = _best(rows, p)
            second += [(p, Split((gpus - t) // dpi, t, False))
                       for t in refine(best.trainer_devices, options, gpus, dpi)]
    if second:
        run(second, "refining")
    return {p: _best(rows, p) for p in cfg.policies}, rows


def _best(rows: list[dict], policy: str) -> Split:
    mine = [r for r in rows if r["policy"] == policy]
    r = max(mine, key=lambda r: (r["e2e_samples_per_s"], -r["trainer_devices"]))
    return Split(r["instances"], r["trainer_devices"], r["colocated"])


def search_table(rows: list[dict], gpus: int, dpi: int) -> str:
    """samples/s of every policy (rows) at every trainer share tried (columns)."""
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    shares = sorted({r["trainer_devices"] for r in rows if not r["colocated"]})
    head = "trainer devices".ljust(18) + "".join(f"{t:>9}" for t in shares) + "   colocated"
    lines = [f"search over {gpus} devices ({dpi} per rollout instance): e2e samples/s by trainer devices", head,
             "-" * len(head)]
    for p in policies:
        by = {r["trainer_devices"]: r for r in rows if r["policy"] == p and not r["colocated"]}
        co = [r for r in rows if r["policy"] == p and r["colocated"]]
        cells = "".join(f"{by[t]['e2e_samples_per_s']:>9.3f}" if t in by else f"{'':>9}" for t in shares)
        lines.append(p.ljust(18) + cells + (f"{co[0]['e2e_samples_per_s']:>12.3f}" if co else ""))
    return "\n".join(lines)
