"""python -m dora.sim calibrate: fit the cost model's coefficients to a real run's profile.

  python -m dora.sim calibrate out/exec/dora/profile.json [more profiles ...] --out cost.yaml
  python -m dora.sim --trace rec.parquet --cost cost.yaml --policy dora ...

Fits (non-negative least squares, one outlier pass: rows whose residual exceeds 6 robust
standard deviations are dropped and the fit repeated):

- decode step: dt = decode_base_s + decode_per_seq_s*running + decode_per_ctx_token_s*ctx
  + prefill_per_token_s*prefill_tokens, over engine steps (vLLM: the interval between engine
  iterations, which includes the prefill chunks scheduled in the step; hf: decode forward alone,
  and prefill_per_token_s from its prefill batches, dt = prefill_per_token_s*tokens);
- weight_load_s: mean load time as the orchestrator saw it (load_start -> load_end); the
  colocated reshard is set to the same (the executor does not colocate);
- publish_s: mean train_end -> publish;
- train: dt = train_base_s + train_device_s_per_token*tokens/trainer_devices;
- request_latency_s: mean submission latency (driver sent -> engine received) plus mean result
  latency (engine finished -> driver received), from the profile's `requests` table (profiles
  without it leave 0, and calibrate says so).

Shared host (`--host-cores N`: the engines and the trainer ran on one machine's N cores, as on a
CPU box): host_cores = N, and the fits see the uncontended costs: decode steps that overlap a
trainer step are left out of the decode fit, and each trainer step's time is divided by
max(1, (k + 1) / N), k the engines decoding when it started (from the profile's train_windows and
t0_wall_s; the simulator then applies the same factor, see dora.sim.cost).

Dense models: decode_expert_s = 0 and moe_imbalance_cv = 0 (real instances carry their own
speed). kv_transfer_* are not measured (the executor re-prefills migrated trajectories) and
keep their defaults. The table printed gives each fit's rows used, R^2, the median relative
residual and the relative error of the summed prediction (what a simulated clock accumulates).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields

import numpy as np
import yaml

from dora.errors import ArgumentParser, InputError, cli_errors, too_small
from dora.io import check_output, write_text
from dora.profile import read_profile
from dora.sim.cost import CostModel

OUTLIER_SIGMAS = 6.0


@dataclass
class Fit:
    name: str
    coef: dict[str, float]
    rows: int
    dropped: int
    r2: float
    rel_median: float  # median |residual| / observed
    rel_total: float  # sum(predicted) / sum(observed) - 1


def nnls_fit(name: str, X: np.ndarray, y: np.ndarray, names: list[str]) -> Fit:
    """Non-negative least squares with one robust outlier pass."""
    from scipy.optimize import nnls

    if len(y) < len(names):
        raise InputError(f"calibrate: {name}: {len(y)} usable rows for {len(names)} coefficients; record a longer run")
    keep = np.ones(len(y), bool)
    for _ in range(2):
        coef, _r = nnls(X[keep], y[keep])
        res = y - X @ coef
        mad = np.median(np.abs(res[keep] - np.median(res[keep]))) * 1.4826
        if mad <= 0:
            break
        new = np.abs(res) <= OUTLIER_SIGMAS * mad
        if new.sum() < len(names) or (new == keep).all():
            break
        keep = new
    pred = X[keep] @ coef
    obs = y[keep]
    ss_res = float(((obs - pred) ** 2).sum())
    ss_tot = float(((obs - obs.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    rel_med = float(np.median(np.abs(obs - pred) / np.maximum(obs, 1e-12)))
    rel_tot = float(pred.sum() / obs.sum() - 1.0) if obs.sum() > 0 else float("nan")
    return Fit(name, dict(zip(names, map(float, coef))), int(keep.sum()), int((~keep).sum()), r2, rel_med, rel_tot)


def mean_fit(name: str, key: str, y: np.ndarray) -> Fit:
    if len(y) == 0:
        raise InputError(f"calibrate: {name}: no rows in the profile(s); record a run with at least one")
    m = float(y.mean())
    rel_med = float(np.median(np.abs(y - m) / np.maximum(y, 1e-12)))
    ss_tot = float(((y - m) ** 2).sum())
    return Fit(name, {key: m}, len(y), 0, 0.0 if ss_tot > 0 else float("nan"), rel_med, 0.0)


def _col(profiles: list[dict], table: str, col: str) -> np.ndarray:
    return np.asarray([v for p in profiles for v in p[table][col]], dtype=float)


def _contention(p: dict, host_cores: float, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(decode steps that overlap a trainer step, slowdown of each trainer step) of one profile."""
    win = p.get("train_windows") or {}
    if "t0_wall_s" not in p or not win.get("t_start_s") and p["train_steps"]["dt_s"]:
        raise InputError(f"calibrate --host-cores: {where} has no train_windows/t0_wall_s (recorded by an older "
                         "version); record the run again")
    d = p["decode_steps"]
    end = np.asarray(d["t_s"], float) - float(p.get("t0_wall_s", 0.0))
    dt = np.asarray(d["dt_s"], float)
    start = end - np.maximum(dt, 0.0)
    inst = np.asarray(d["instance"], int)
    t0 = np.asarray(win.get("t_start_s", []), float)
    t1 = np.asarray(win.get("t_end_s", []), float)
    if len(t0) != len(p["train_steps"]["dt_s"]):
        raise InputError(f"calibrate --host-cores: {where}: {len(t0)} train windows for "
                         f"{len(p['train_steps']['dt_s'])} train steps (a trainer restart?); use another run")
    overlap = np.zeros(len(end), bool)
    slow = np.ones(len(t0))
    for i, (a, b) in enumerate(zip(t0, t1)):
        overlap |= (start < b) & (end > a)
        k = len(set(inst[(start <= a) & (end >= a) & (dt > 0)].tolist()))
        slow[i] = max(1.0, (k + 1) / host_cores)
    return overlap, slow


def calibrate(profiles: list[dict], sources: list[str] | None = None,
              host_cores: float = 0.0) -> tuple[CostModel, list[Fit]]:
    """Fit a CostModel to one or more profiles of the same backend (host_cores > 0: the engines
    and the trainer shared that many cores; the fits then see uncontended costs)."""
    if not profiles:
        raise InputError("calibrate: no profile given; pass one or more profiles written by dora.exec --profile-out")
    if not 0 <= host_cores < float("inf"):
        raise too_small("calibrate --host-cores", host_cores, 0)
    backends = sorted({str(p.get("backend")) for p in profiles})
    if len(backends) > 1:
        raise InputError(f"calibrate: profiles mix backends {backends}; their decode timings mean different "
                         "things, calibrate one backend at a time")
    backend = backends[0]
    fits: list[Fit] = []
    dt = _col(profiles, "decode_steps", "dt_s")
    run = _col(profiles, "decode_steps", "running")
    ctx = _col(profiles, "decode_steps", "ctx_tokens")
    pre = _col(profiles, "decode_steps", "prefill_tokens")
    ok = (dt > 0) & (run > 0)
    slow = None
    if host_cores > 0:
        cont = [_contention(p, host_cores, (sources or [f"profile {i}" for i in range(len(profiles))])[i])
                for i, p in enumerate(profiles)]
        ok &= ~np.concatenate([c[0] for c in cont])
        slow = np.concatenate([c[1] for c in cont])
    names = ["decode_base_s", "decode_per_seq_s", "decode_per_ctx_token_s"]
    cols = [np.ones(ok.sum()), run[ok], ctx[ok]]
    if backend != "hf":
        names.append("prefill_per_token_s")
        cols.append(pre[ok])
    fits.append(nnls_fit("decode step", np.column_stack(cols), dt[ok], names))
    if backend == "hf":
        ptok = _col(profiles, "prefills", "tokens")
        pdt = _col(profiles, "prefills", "dt_s")
        good = (ptok > 0) & (pdt > 0)
        fits.append(nnls_fit("prefill", ptok[good].reshape(-1, 1), pdt[good], ["prefill_per_token_s"]))
    fits.append(mean_fit("weight load", "weight_load_s", _col(profiles, "weight_loads", "dt_s")))
    fits.append(mean_fit("publish", "publish_s", _col(profiles, "publishes", "dt_s")))
    tdev = np.asarray([float(p["trainer_devices"]) for p in profiles for _ in p["train_steps"]["dt_s"]])
    ttok = _col(profiles, "train_steps", "tokens")
    tdt = _col(profiles, "train_steps", "dt_s")
    if slow is not None:
        tdt = tdt / slow
    fits.append(nnls_fit("train step", np.column_stack([np.ones(len(tdt)), ttok / tdev]), tdt,
                         ["train_base_s", "train_device_s_per_token"]))
    req = [p["requests"] for p in profiles if p.get("requests") and p["requests"]["t_sent_s"]]
    if req:
        sub = np.asarray([b - a for r in req for a, b in zip(r["t_sent_s"], r["t_submit_s"])])
        res = np.asarray([b - a for r in req for a, b in zip(r["t_finish_s"], r["t_seen_s"])])
        f = mean_fit("request", "request_latency_s", np.maximum(sub, 0.0) + np.maximum(res, 0.0))
        fits.append(f)
    coef: dict[str, float] = {}
    for f in fits:
        coef.update(f.coef)
    if coef["decode_base_s"] + coef["decode_per_seq_s"] <= 0:
        raise InputError("calibrate: the decode fit gave zero base and per-sequence cost; the profile's decode "
                         "steps carry no signal (record a run with generation)")
    coef.update(decode_expert_s=0.0, moe_imbalance_cv=0.0, colocated_reshard_s=coef["weight_load_s"],
                host_cores=float(host_cores))
    src = ", ".join(sources) if sources else "profile"
    cost = CostModel(**coef, source=f"dora.sim calibrate ({backend}) from {src}")
    cost.validate()
    return cost, fits


def fit_table(fits: list[Fit]) -> str:
    lines = [f"{'fit':<12} {'coefficient':<24} {'value':>12} {'rows':>6} {'dropped':>7} {'R^2':>7} "
             f"{'med |rel res|':>13} {'sum rel err':>11}"]
    for f in fits:
        for i, (k, v) in enumerate(f.coef.items()):
            stats = (f"{f.rows:>6} {f.dropped:>7} {f.r2:>7.3f} {f.rel_median:>13.1%} {f.rel_total:>+11.2%}"
                     if i == 0 else "")
            lines.append(f"{f.name if i == 0 else '':<12} {k:<24} {v:>12.4g} {stats}")
    return "\n".join(lines)


def cost_yaml(cost: CostModel, fits: list[Fit]) -> str:
    head = ["# cost model fitted by python -m dora.sim calibrate; load with python -m dora.sim --cost FILE"]
    head += ["# " + line for line in fit_table(fits).splitlines()]
    body = {f.name: getattr(cost, f.name) for f in fields(cost)}
    return "\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False)


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.sim calibrate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", metavar="PROFILE", help="profile.json written by python -m dora.exec")
    ap.add_argument("--out", required=True, metavar="COST.yaml", help="cost file to write (for --cost)")
    ap.add_argument("--host-cores", type=float, default=0.0, metavar="N",
                    help="the engines and the trainer shared N cores (a CPU box): fit uncontended costs and "
                         "write host_cores = N (default 0: devices of their own)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("dora.sim calibrate"):
        out = check_output(args.out, ("yaml", "yml"), "--out", "cost.yaml")
        profiles = [read_profile(p) for p in args.profiles]
        cost, fits = calibrate(profiles, [str(p) for p in args.profiles], host_cores=args.host_cores)
        text = cost_yaml(cost, fits)
        print(fit_table(fits))
        if not any(f.name == "request" for f in fits):
            print("calibrate: the profile(s) have no request stamps (recorded before they were added): "
                  "request_latency_s stays 0", file=sys.stderr)
        write_text(out, text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
