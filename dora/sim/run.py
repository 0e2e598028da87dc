"""Run one policy on one trace in the simulated cluster and compute its metrics."""

from __future__ import annotations

import gc
import sys
import time
from contextlib import contextmanager

import numpy as np

from dora.body import RunResult, run_info as body_run_info
from dora.config import to_dict
from dora.errors import InputError, too_small
from dora.eventlog import EventLog
from dora.limits import check_memory, check_time
from dora.metrics import compute_metrics
from dora.sched.registry import POLICIES
from dora.sched.policy import Policy
from dora.sched.state import ClusterView
from dora.sim.bound import bound_samples_per_s, eta_bound_samples_per_s
from dora.sim.cluster import Cluster, ClusterSpec
from dora.sim.config import SimConfig
from dora.sim.faults import straggler_factors
from dora.sim.imbalance import ImbalanceProcess
from dora.sim.memory import resolve as resolve_memory
from dora.trace import Trace, load_trace


def imbalance_cv(cfg: SimConfig, trace: Trace) -> float:
    """cost.moe_imbalance_cv, or (at -1) the one the trace's generator recorded; a trace that
    records none (not made by dora.trace generate) runs its instances at equal speed (0)."""
    if cfg.cost.moe_imbalance_cv >= 0:
        return cfg.cost.moe_imbalance_cv
    cv = trace.metadata.get("params", {}).get("moe_imbalance_cv", 0.0)
    if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not 0 <= cv < float("inf"):
        raise InputError(f"bad trace {trace.path}: its metadata records moe_imbalance_cv {cv!r}, not a number >= 0; "
                         "fix the metadata or set cost.moe_imbalance_cv")
    return float(cv)


def slowdowns(cfg: SimConfig, trace: Trace, n: int) -> np.ndarray:
    """Per-instance MoE expert-parallel slowdown factors: lognormal, mean 1, the trace's CV."""
    cv = imbalance_cv(cfg, trace)
    if cv <= 0:
        return np.ones(n)
    s2 = np.log1p(cv * cv)
    rng = np.random.default_rng(cfg.seed)
    return rng.lognormal(-s2 / 2.0, np.sqrt(s2), n)


def check_fits(cfg: SimConfig, trace: Trace) -> None:
    """Refuse configurations the trace cannot run on (one line each); slots and KV capacity left
    to memory (0) are derived first."""
    cfg, _ = resolve_memory(cfg, trace)
    c, p = cfg.cluster, cfg.policy
    G = p.group_size or trace.group_size
    if p.group_size and p.group_size != trace.group_size:
        raise InputError(f"group_size: {p.group_size} does not match the trace's groups of {trace.group_size} "
                         f"({trace.path}); leave it 0 to use the trace's")
    if p.batch_size > trace.num_groups:
        raise InputError(f"batch_size: {p.batch_size} groups per step is more than the {trace.num_groups} groups "
                         f"in {trace.path}; lower --batch-size or use a larger trace")
    need = int(trace.prompt_len.max()) + int(trace.response_len.max())
    if trace.turns is not None:  # tool output joins the context too
        need = int((trace.prompt_len.astype(np.int64) + trace.response_len + trace.tool_tokens_total()).max())
    if c.kv_tokens < need:
        raise InputError(f"kv_tokens: {c.kv_tokens} per instance cannot hold the longest trajectory of {trace.path} "
                         f"({need} tokens); raise cluster.kv_tokens to at least {need}")
    if G < 1:
        raise too_small("group_size", G, 1, fix="set policy.group_size to 1 or more, or 0 for the trace's")
    if c.instances * c.max_seqs < G:
        raise InputError(f"cluster: {c.instances} instances x {c.max_seqs} decode slots cannot hold one group of "
                         f"{G} samples at once; raise cluster.max_seqs or cluster.instances")
    for t, i in cfg.faults.fail_at:
        if int(i) >= c.instances:
            raise InputError(f"faults.fail_at: instance {int(i)} does not exist (rollout instances are "
                             f"0..{c.instances - 1}); use an id below cluster.instances")
    imbalance_cv(cfg, trace)  # refuse a bad recorded value before any run
    events, need, seconds = run_estimate(cfg, trace)
    what = f"simulation of {len(cfg.policies)} polic{'ies' if len(cfg.policies) > 1 else 'y'} (about {events:,.0f} " \
           "events each)"
    fix = ("raise --mtbf-s (each failure adds events and downtime), or " if cfg.faults.mtbf_s > 0 else "") + \
        "lower --steps, --batch-size, --eta, --instances or --max-seqs, or run fewer policies at once"
    check_memory(what, need, fix)
    check_time(what, seconds, fix)


# What a run holds and takes, generously (measured: 3-4 log rows per trajectory, ~2 per instance
# and step, ~8 KiB per instance; 7-50 us per row, ~80 us per instance and step): every policy's
# event frame is kept until the outputs are written.
ROWS_PER_TRAJECTORY, ROWS_PER_INSTANCE_STEP, ROWS_PER_FAILURE = 8, 4, 4
BYTES_PER_ROW, BYTES_PER_INSTANCE, BYTES_PER_SLOT = 400, 16384, 40
S_PER_ROW, S_PER_INSTANCE_STEP = 2e-5, 2e-4
BYTES_PER_BOUND_GROUP = 64  # eta_bound_samples_per_s: a few float64/int64 arrays over (steps + eta) x B groups


def run_estimate(cfg: SimConfig, trace: Trace) -> tuple[float, float, float]:
    """(log rows per policy, bytes, wall seconds) of the command's runs, before they start
    (--reference adds one event per decode step of an instance)."""
    c, p = cfg.cluster, cfg.policy
    G = p.group_size or trace.group_size
    n_inst = float(c.instances) + c.trainer_devices  # elastic trainer devices may serve as instances
    steps = float(cfg.steps) + min(p.eta, cfg.steps) + 1  # groups in flight beyond the last step
    trajectories = steps * p.batch_size * G
    rows = trajectories * ROWS_PER_TRAJECTORY + steps * n_inst * ROWS_PER_INSTANCE_STEP
    f = cfg.faults
    redraw_s = cfg.imbalance.redraw_s if imbalance_cv(cfg, trace) > 0 else 0.0  # redraws only with an imbalance
    if f.mtbf_s > 0 or redraw_s > 0:  # events over the simulated time, stretched by the instances' downtime
        rate = bound_samples_per_s(trace, cfg.cost, c.instances, c.devices_per_instance, c.max_seqs, c.kv_tokens,
                                   c.trainer_devices, p.batch_size * G, np.ones(int(n_inst) + 1))["bound_samples_per_s"]
        sim_s = trajectories / max(rate, 1e-12) * ((f.mtbf_s + f.repair_s) / f.mtbf_s if f.mtbf_s > 0 else 1.0)
        rows += ROWS_PER_FAILURE * c.instances * sim_s / f.mtbf_s if f.mtbf_s > 0 else 0.0
        rows += n_inst * sim_s / redraw_s if redraw_s > 0 else 0.0  # a slowdown redraw per instance
    held = n_inst * (BYTES_PER_INSTANCE + BYTES_PER_SLOT * (c.max_seqs + 1.0))
    seconds = rows * S_PER_ROW + n_inst * (cfg.steps + 1) * S_PER_INSTANCE_STEP
    if cfg.reference:  # decode steps: every token, shared by the sequences decoding together on an instance
        per_step = max(1.0, min(float(c.max_seqs), p.batch_size * G / max(c.instances, 1)))
        seconds += trajectories * float(trace.response_len.mean()) / per_step * S_PER_ROW
    n = len(cfg.policies)
    eta_bound = (float(cfg.steps) + p.eta) * p.batch_size * BYTES_PER_BOUND_GROUP  # its arrays grow with eta
    return rows, rows * BYTES_PER_ROW * n + held + eta_bound, seconds * n


def replay_warning(trace: Trace, cfg: SimConfig) -> str | None:
    """One line when the run trains more groups than the trace holds (groups are drawn in order and
    the trace starts again from its first group when it runs out)."""
    need = cfg.steps * cfg.policy.batch_size
    if need <= trace.num_groups:
        return None
    return (f"warning: {trace.path} holds {trace.num_groups:,} groups and the run trains {need:,} ({cfg.steps} steps x "
            f"B={cfg.policy.batch_size}): each group is replayed about {need / trace.num_groups:.1f} times; use a "
            f"larger trace or fewer --steps for lengths that do not repeat")


def make_policy(name: str, cfg: SimConfig, group_size: int) -> Policy:
    pc = cfg.policy
    if pc.group_size == 0:
        from dataclasses import replace
        pc = replace(pc, group_size=group_size)
    return POLICIES[name](pc)


def simulate(trace: Trace, cfg: SimConfig, name: str, progress: bool = True) -> RunResult:
    cfg, _ = resolve_memory(cfg, trace)  # cluster.max_seqs / kv_tokens of 0: derived from memory
    check_fits(cfg, trace)
    G = trace.group_size
    policy = make_policy(name, cfg, G)
    c = cfg.cluster
    colocated = policy.placement == "colocated"
    on_trainer = c.trainer_devices // c.devices_per_instance  # instances the trainer's devices can hold
    n_inst = c.instances + (on_trainer if colocated or policy.elastic else 0)
    elastic = list(range(c.instances, n_inst)) if policy.elastic and not colocated else []
    slow_all = slowdowns(cfg, trace, c.instances + on_trainer + 1)
    strag = np.ones(n_inst)
    strag[:c.instances] = straggler_factors(cfg.faults, c.instances, cfg.seed)
    slow_all[:n_inst] *= strag
    spec = ClusterSpec(n_inst, c.devices_per_instance, c.max_seqs, c.kv_tokens, c.trainer_devices, colocated,
                       slow_all[:n_inst], tuple(elastic), strag)
    rollout_devices = (n_inst - len(elastic)) * c.devices_per_instance
    bound = bound_samples_per_s(trace, cfg.cost, c.instances, c.devices_per_instance, c.max_seqs, c.kv_tokens,
                                c.trainer_devices, cfg.policy.batch_size * G, slow_all)
    eta_bound = eta_bound_samples_per_s(trace, cfg.cost, c.instances, c.devices_per_instance, c.max_seqs, c.kv_tokens,
                                        c.trainer_devices, cfg.policy.batch_size, cfg.policy.eta, cfg.steps, slow_all)
    run_info = body_run_info("sim", name, cfg.policy.eta, cfg.policy.batch_size, G, cfg.steps, n_inst,
                             c.devices_per_instance, rollout_devices, 0 if colocated else c.trainer_devices, colocated,
                             elastic, c.max_seqs, trace=trace.path, kv_tokens=c.kv_tokens)
    log = EventLog(run_info)
    wall0 = time.perf_counter()
    last = [wall0]

    def report(step: int, now: float) -> None:
        w = time.perf_counter()
        if progress and (w - last[0] > 2.0 or step == cfg.steps):
            last[0] = w
            print(f"  [{name}] step {step}/{cfg.steps}  simulated {now:,.0f} s  wall {w - wall0:.1f} s",
                  file=sys.stderr, flush=True)

    with _gc_paused():
        cluster = Cluster(trace, spec, cfg.cost, policy, cfg.steps, reference=cfg.reference, log=log,
                          progress=report, faults=cfg.faults, seed=cfg.seed, weights=cfg.weights,
                          imbalance=ImbalanceProcess(cfg.imbalance, imbalance_cv(cfg, trace), cfg.seed))
        cluster.run()
        wall = time.perf_counter() - wall0
        df = log.to_frame()
        m = compute_metrics(df, run_info)
        # The policy's view holds a record per trajectory and is in no reference cycle once the
        # policy (cyclic, like the cluster) lets go of it: dropping it here frees those records by
        # reference counting, rather than have the collector trace them all when it resumes.
        policy.view = ClusterView()
    m["bound_samples_per_s"] = bound["bound_samples_per_s"]
    m["bound_fraction"] = m["e2e_samples_per_s"] / bound["bound_samples_per_s"]
    m["eta_bound_samples_per_s"] = eta_bound["eta_bound_samples_per_s"]
    m["eta_bound_fraction"] = m["e2e_samples_per_s"] / eta_bound["eta_bound_samples_per_s"]
    placed = eta_bound["eta_bound_colocated" if colocated else "eta_bound_disaggregated" if elastic
                       else "eta_bound_lending" if policy.lends and cluster.lendable
                       else "eta_bound_rollout_only"]  # the bound of this run's placement
    m["eta_bound_placement_samples_per_s"] = placed
    m["eta_bound_placement_fraction"] = m["e2e_samples_per_s"] / placed
    m["sim_wall_s"] = wall
    m["events"] = cluster.sim_events
    m["scheduler_events"] = cluster.events
    m["instance_failures"] = cluster.failures
    m["instances_failed"] = len(cluster.failed_ids)
    config = {
        **{k: v for k, v in run_info.items() if k not in ("policy", "body")},
        "seed": cfg.seed, "reference": cfg.reference, "trace_groups": trace.num_groups,
        "moe_imbalance_cv": imbalance_cv(cfg, trace),
        "cluster": to_dict(cfg.cluster), "cost": to_dict(cfg.cost), "policy": policy.config_dict(),
        "faults": to_dict(cfg.faults), "weights": to_dict(cfg.weights), "imbalance": to_dict(cfg.imbalance),
        "bound": {k: v for k, v in bound.items()},
        "eta_bound": eta_bound,
    }
    return RunResult(name, config, m, df)


@contextmanager
def _gc_paused():
    """Pause the cyclic collector from building the cluster to the metrics: the run holds
    millions of long-lived acyclic objects (trajectories, log rows) that every collection
    would re-scan (Cluster.run pauses it for the event loop alone; the policy's first
    admission, the leftovers and the log's packing still paid for it)."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if on:
            gc.enable()


_TRACES: dict[str, Trace] = {}  # per process: path -> Trace (parallel workers load each trace once)


def cached_trace(path: str) -> Trace:
    if path not in _TRACES:
        _TRACES[path] = load_trace(path)
    return _TRACES[path]


def run_metrics(cfg: SimConfig, policy: str) -> dict:
    """One quiet simulate() whose metrics alone come back (a task for `dora.parallel.run_tasks`)."""
    return simulate(cached_trace(cfg.trace), cfg, policy, progress=False).metrics
