"""Metrics and the C1-C3 checks, computed from an event log alone.

Definitions (a simulated and a real run go through the same code):
- steady state excludes the first step: e2e rates count trajectories trained at trainer
  versions >= 1 over the time from the first to the last publication;
- a trajectory's generating version is the version of its first token; its staleness is
  trainer version at consumption minus that; C1 counts trained trajectories whose segments
  with tokens carry more than one version;
- useful device-seconds: decode-slot shares and first prefill (the prompt; for multi-turn
  trajectories also each tool call's output) of trajectories that end up trained, plus trainer
  step compute; everything else (idle, empty slots, weight loads, re-prefill, work on
  discarded trajectories) is bubble. A trajectory in a tool call is out of the batch: no
  decode share, its slot empty unless another sequence fills it (`tool_start`/`tool_end`
  rows mark the calls; they are not segment rows);
- waste: tokens of trajectories that are neither trained nor live at the end (aborted, lost,
  or discarded with their group) plus every re-prefilled token, over all generated tokens.
  Work still live when the run ends (`leftover` rows) is neither trained nor waste;
- C2: a sampled group is lost if it is neither trained nor still viable at the end (in
  flight, or finished within η versions of the final one); duplicated if trained in more
  than one step or with more trajectories than its size;
- rollout_share (extra): the share of step time the trainer
  waits on rollout. Over the steady-state steps (publish i -> publish i+1; first step
  excluded; with fewer than two publications, time 0 -> first publication), the time from
  the publication to the step's train_start during which at least one trajectory segment
  is live (dispatched/migrated/resumed and not yet ended), summed, over the summed step
  time. For `sync` this is the generation phase: weight loads after the publication (no
  segment live), training and publication are excluded. For streaming policies it is the
  time the trainer waits for its batch while generation runs; generation that overlaps
  training is not counted (the trainer is not waiting on it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dora.errors import InputError
from dora.eventlog import SEGMENT_END, SEGMENT_START

METRIC_NAMES = (
    "e2e_samples_per_s", "e2e_tokens_per_s", "rollout_tokens_per_s", "step_time_mean_s", "step_time_p99_s",
    "bubble_ratio", "rollout_bubble_ratio", "trainer_bubble_ratio", "waste_ratio", "staleness_mean",
    "staleness_max", "c1_violations", "c2_lost", "c2_duplicated", "c3_violations", "migrations",
    "reprefill_tokens", "weight_loads", "trained_samples", "steps",
)


class EventColumn:
    """The `event` column as category codes: `col == name` and `col.isin(names)` give row
    masks without turning millions of rows into strings."""

    def __init__(self, events: pd.Series):
        cat = events if isinstance(events.dtype, pd.CategoricalDtype) else events.astype("category")
        self.codes = cat.cat.codes.to_numpy()
        self.index = {str(c): k for k, c in enumerate(cat.cat.categories)}

    def __eq__(self, name: object) -> np.ndarray:  # type: ignore[override]
        k = self.index.get(str(name))
        return self.codes == k if k is not None else np.zeros(len(self.codes), bool)

    def isin(self, names) -> np.ndarray:
        ks = [self.index[n] for n in names if n in self.index]
        return np.isin(self.codes, ks)


def _trained_versions(df: pd.DataFrame, ev: EventColumn) -> tuple[pd.DataFrame, np.ndarray, pd.Series]:
    """The `train` rows, each one's generating version (its first token's: the lowest version of
    its segments that produced tokens, else the train row's own), and versions per trajectory."""
    tr = df[ev == "train"]
    seg = df[ev.isin(SEGMENT_END)]
    made = seg[(seg["tokens"].to_numpy() > 0) & np.isin(seg["trajectory"].to_numpy(), tr["trajectory"].to_numpy())]
    by = made.groupby("trajectory")["version"]
    gen_ver = by.min().reindex(tr["trajectory"].to_numpy()).to_numpy()
    if np.isnan(gen_ver.astype(float)).any():
        gen_ver = np.where(np.isnan(gen_ver.astype(float)), tr["version"].to_numpy(), gen_ver)
    return tr, gen_ver.astype(np.int64), by.nunique()


def staleness(df: pd.DataFrame) -> np.ndarray:
    """Staleness of each trained trajectory (trainer version at training minus generating
    version), in `train`-row order: what staleness_mean/max and C3 summarise."""
    tr, gen_ver, _ = _trained_versions(df, EventColumn(df["event"]))
    return tr["trainer_version"].to_numpy().astype(np.int64) - gen_ver


def run_fact(run: dict, key: str, low: int, where: str, why: str) -> int:
    """The run metadata's integer `key`, at least `low`; else InputError saying `why` it is needed."""
    v = run.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        got = "missing" if v is None else f"{v!r}"
        raise InputError(f"{where}: run metadata 'dora.run' has {key} {got}, not an integer >= {low}; {why} "
                         "(write the log with dora.sim or dora.exec --events)")
    return int(v)


def run_facts(run: dict, where: str = "event log") -> tuple[int, int, int, bool]:
    """(eta, rollout_devices, trainer_devices, colocated) of a run, checked: C3 needs eta, the
    bubble ratios the device counts (a colocated run's trainer shares the rollout devices: 0)."""
    eta = run_fact(run, "eta", 0, where, "C3 (staleness <= eta) cannot be checked without it")
    rollout = run_fact(run, "rollout_devices", 1, where, "the bubble ratios are shares of the devices")
    colocated = run.get("colocated", False)
    if not isinstance(colocated, bool):
        raise InputError(f"{where}: run metadata 'dora.run' has colocated {colocated!r}, not true/false")
    trainer = run_fact(run, "trainer_devices", 0 if colocated else 1, where, "the bubble ratios are shares of the devices")
    return eta, rollout, trainer, colocated


def compute_metrics(df: pd.DataFrame, run: dict | None = None) -> dict:
    """All metrics from one run's event log. `run` defaults to df.attrs['run']; InputError when
    it lacks eta or the device counts (see run_facts)."""
    run = run if run is not None else df.attrs.get("run", {})
    eta, rollout_devices, trainer_devices, colocated = run_facts(run, str(df.attrs.get("path", "event log")))
    ev = EventColumn(df["event"])
    t = df["t_s"].to_numpy()

    pub = np.sort(t[ev == "publish"])
    steps = int(len(pub))
    end_rows = t[ev == "run_end"]
    t_end = float(end_rows.max()) if len(end_rows) else (float(pub[-1]) if steps else float(t.max(initial=0.0)))
    gaps = np.diff(pub) if steps >= 2 else (pub if steps else np.zeros(0))

    # generating version and C1 from segments that produced tokens
    tr, gen_ver, nver = _trained_versions(df, ev)
    tr_traj = tr["trajectory"].to_numpy()
    tr_ver = tr["trainer_version"].to_numpy()
    tr_tok = tr["tokens"].to_numpy()
    stale = tr_ver - gen_ver
    c1 = int((nver > 1).sum())

    seg = df[ev.isin(SEGMENT_END)]
    seg_traj = seg["trajectory"].to_numpy()
    seg_tok = seg["tokens"].to_numpy()
    trained_mask = np.isin(seg_traj, tr_traj)

    # steady-state throughput
    if steps >= 2:
        win = pub[-1] - pub[0]
        sel = tr_ver >= 1
        e2e_samples = float(sel.sum() / win) if win > 0 else 0.0
        e2e_tokens = float(tr_tok[sel].sum() / win) if win > 0 else 0.0
    else:
        e2e_samples = float(len(tr_traj) / t_end) if t_end > 0 else 0.0
        e2e_tokens = float(tr_tok.sum() / t_end) if t_end > 0 else 0.0

    generated = float(seg_tok.sum())
    # waste: tokens of trajectories neither trained nor still live at the end, and re-prefill
    lo = df[ev == "leftover"]
    live_end = lo["trajectory"].to_numpy()
    waste_tok = float(seg_tok[~trained_mask & ~np.isin(seg_traj, live_end)].sum())
    mig_in = df[ev == "migrate_in"]
    reprefill = int(df["tokens"].to_numpy()[(ev == "preempt") | (ev == "resume")].sum()
                    + mig_in["tokens"].to_numpy()[mig_in["detail"].astype(str).str.endswith("reprefill").to_numpy()].sum())
    waste_ratio = (waste_tok + reprefill) / generated if generated > 0 else 0.0

    # bubbles
    useful_seg = seg["busy_s"].to_numpy() + seg["prefill_s"].to_numpy()
    useful_roll = float(useful_seg[trained_mask].sum())
    # rollout work done on the trainer's devices (elastic instances) counts for the trainer's devices
    on_trainer = np.isin(seg["instance"].to_numpy(), list(run.get("elastic_instances", [])))
    useful_elastic = float(useful_seg[trained_mask & on_trainer].sum())
    te = df[ev == "train_end"]
    useful_train = float(te["busy_s"].sum())
    # training on rollout devices lent to the trainer counts for the rollout devices
    useful_lent = float(df["busy_s"].to_numpy()[ev == "train_lent"].sum())
    train_time = float(te["dur_s"].sum())
    if colocated:
        total = rollout_devices * t_end
        roll_cap = rollout_devices * max(t_end - train_time, 1e-12)
        train_cap = rollout_devices * max(train_time, 1e-12)
    else:
        total = (rollout_devices + trainer_devices) * t_end
        roll_cap = rollout_devices * t_end
        train_cap = trainer_devices * t_end
    bubble = _idle_share(useful_roll + useful_train, total)
    roll_bubble = _idle_share(useful_roll - useful_elastic + useful_lent, roll_cap)
    train_bubble = _idle_share(useful_train + useful_elastic - useful_lent, train_cap)

    # C2
    size = run_fact(run, "group_size", 1, str(df.attrs.get("path", "event log")), "C2 counts groups of that size")
    sampled = set(df["prompt_id"].to_numpy()[ev == "sample"].tolist())
    per_group = tr.groupby("prompt_id").agg(n=("trajectory", "size"), steps=("trainer_version", "nunique"))
    dup = per_group[(per_group["steps"] > 1) | (per_group["n"] > size)]
    trained_groups = set(per_group.index.tolist())
    waiting = lo["detail"].astype(str).to_numpy() == "complete"
    too_old = steps - lo["version"].to_numpy() > eta
    leftover = set(lo["prompt_id"].to_numpy()[~(waiting & too_old)].tolist())
    lost = len(sampled - trained_groups - leftover)

    c3 = int((stale > eta).sum())
    return {
        "e2e_samples_per_s": e2e_samples,
        "e2e_tokens_per_s": e2e_tokens,
        "rollout_tokens_per_s": generated / t_end if t_end > 0 else 0.0,
        "step_time_mean_s": float(gaps.mean()) if len(gaps) else 0.0,
        "step_time_p99_s": float(np.percentile(gaps, 99)) if len(gaps) else 0.0,
        "bubble_ratio": float(bubble),
        "rollout_bubble_ratio": float(roll_bubble),
        "trainer_bubble_ratio": float(train_bubble),
        "waste_ratio": float(waste_ratio),
        "staleness_mean": float(stale.mean()) if len(stale) else 0.0,
        "staleness_max": int(stale.max()) if len(stale) else 0,
        "c1_violations": c1,
        "c2_lost": int(lost),
        "c2_duplicated": int(len(dup)),
        "c3_violations": c3,
        "migrations": int((ev == "migrate_out").sum()),
        "reprefill_tokens": reprefill,
        "weight_loads": int((ev == "load_end").sum()),
        "trained_samples": int(len(tr_traj)),
        "steps": steps,
        "sim_time_s": t_end,
        "rollout_share": rollout_share(df, ev, t, pub),
        **weight_sync_metrics(df, ev),
    }


def weight_sync_metrics(df: pd.DataFrame, ev: EventColumn) -> dict:
    """Collective weight syncs (weight_sync_end rows, exec only): how many, their mean seconds,
    and the bytes sent in all (each sync's bytes once, whatever the number of engines)."""
    sel = ev == "weight_sync_end"
    dur = df["dur_s"].to_numpy()[sel]
    return {"weight_syncs": int(sel.sum()), "weight_sync_s_mean": float(dur.mean()) if len(dur) else 0.0,
            "weight_sync_bytes": int(df["tokens"].to_numpy()[sel].sum())}


def _idle_share(useful: float, capacity: float) -> float:
    """1 - useful / capacity; float noise around a fully busy device (|x| < 1e-9) reads 0."""
    if capacity <= 0:
        return 0.0
    x = 1.0 - useful / capacity
    return 0.0 if abs(x) < 1e-9 else x


def rollout_share(df: pd.DataFrame, ev: np.ndarray, t: np.ndarray, pub: np.ndarray) -> float:
    """Share of steady-state step time between a publication and the next train_start with a live segment."""
    if len(pub) == 0:
        return 0.0
    edges = pub if len(pub) >= 2 else np.array([0.0, pub[0]])
    starts = np.sort(t[ev.isin(SEGMENT_START)])
    ends = np.sort(t[ev.isin(SEGMENT_END)])
    if len(starts) == 0:
        return 0.0
    # union of live-segment intervals: a +1/-1 sweep (ends first at equal times)
    times = np.concatenate([ends, starts])
    delta = np.concatenate([-np.ones(len(ends)), np.ones(len(starts))])
    order = np.lexsort((delta, times))
    times, live = times[order], np.cumsum(delta[order])
    prev = np.concatenate([[0.0], live[:-1]])
    up, down = times[(prev <= 0) & (live > 0)], times[(prev > 0) & (live <= 0)]
    if len(down) < len(up):
        down = np.append(down, max(float(t.max()), float(edges[-1])))
    xs = np.column_stack([up, down]).ravel()  # live time accumulated up to each breakpoint
    acc = np.cumsum(down - up)
    ys = np.column_stack([np.concatenate([[0.0], acc[:-1]]), acc]).ravel()

    def cov(x: np.ndarray) -> np.ndarray:  # live time in [0, x]
        return np.interp(x, xs, ys, left=0.0, right=float(ys[-1]))

    ts = np.sort(t[ev == "train_start"])
    lo, hi = edges[:-1], edges[1:]
    # the step's train_start: the last one before its publication (none: the whole window waits)
    if len(ts):
        k = np.searchsorted(ts, hi, side="left") - 1
        tstart = np.where(k >= 0, ts[np.clip(k, 0, None)], hi)
    else:
        tstart = hi
    tstart = np.clip(tstart, lo, hi)
    total = float((hi - lo).sum())
    return float((cov(tstart) - cov(lo)).sum() / total) if total > 0 else 0.0
