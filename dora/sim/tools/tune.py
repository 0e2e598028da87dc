"""python -m dora.sim tune: search the dora policy's knobs in simulation, write the winner as YAML.

  python -m dora.sim tune --trace rec.parquet --cost cost.yaml --instances 2 --max-seqs 32 \\
      --trainer-devices 1 --devices-per-instance 1 --batch-size 4 --eta 2 --steps 4 --out tuned.yaml
  python -m dora.exec --model M --policy dora --policy-config tuned.yaml

Takes every flag of `python -m dora.sim` (the cluster, cost, trace and run length the candidates
are simulated on). Candidates: the base config itself, then `--budget` random points of the grid

  eta                       0 .. --eta-max (default: the base eta)
  dora.repartition_load     0.25, 0.5, 0.75, 1.0
  dora.spread_tails         true, false
  dora.host_max             1, 2, 4, 8
  dora.consolidate          true, false
  dora.max_regenerations    0, 1
  dora.versions_per_instance 1 .. --max-versions-per-instance (default 1: the executor's engines
                            serve one version at a time)

(seeded: --search-seed). A candidate is admissible when its run holds C1-C3 (no violations, nothing
lost or duplicated) and completes the steps; the admissible one with the highest
e2e_samples_per_s wins, if it beats the base config by at least --min-gain (else the base is kept).
Prints the ranked table; --out writes `policy: {eta, dora: {...}}`
(what `python -m dora.exec --policy-config` and `python -m dora.sim --config` load); --csv the table.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import asdict, replace

import yaml

from dora.errors import InputError, cli_errors, too_small
from dora.io import atomic_path, check_output, write_text
from dora.limits import check_memory, check_time
from dora.sim.config import SimConfig
from dora.sim.run import check_fits, run_estimate, simulate
from dora.trace import load_trace

GRID = {
    "repartition_load": (0.25, 0.5, 0.75, 1.0),
    "spread_tails": (True, False),
    "host_max": (1, 2, 4, 8),
    "consolidate": (True, False),
    "max_regenerations": (0, 1),
}
CONSTRAINTS = ("c1_violations", "c2_lost", "c2_duplicated", "c3_violations")


def search_space(eta_max: int, vpi_max: int) -> int:
    """How many distinct candidates the grid holds."""
    space = (eta_max + 1) * vpi_max
    for v in GRID.values():
        space *= len(v)
    return space


def candidates(base: SimConfig, budget: int, eta_max: int, vpi_max: int, seed: int) -> list[dict]:
    """The base knobs first, then up to `budget` distinct random grid points."""
    d = base.policy.dora
    first = {"eta": base.policy.eta, **{k: getattr(d, k) for k in GRID},
             "versions_per_instance": d.versions_per_instance}
    out, seen = [first], {tuple(sorted(first.items()))}
    rng = random.Random(seed)
    space = search_space(eta_max, vpi_max)
    tries = 0
    while len(out) < budget + 1 and len(seen) < space and tries < 100 * (budget + 1):
        tries += 1
        c = {"eta": rng.randint(0, eta_max), **{k: rng.choice(v) for k, v in GRID.items()},
             "versions_per_instance": rng.randint(1, vpi_max)}
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def apply(base: SimConfig, c: dict) -> SimConfig:
    dora = replace(base.policy.dora, **{k: v for k, v in c.items() if k != "eta"})
    cfg = replace(base, policies=["dora"], policy=replace(base.policy, eta=c["eta"], sections={**base.policy.sections, "dora": dora}))
    cfg.validate()
    dora.validate()
    return cfg


def tune(base: SimConfig, trace, budget: int, eta_max: int, vpi_max: int, seed: int,
         progress: bool = True) -> list[dict]:
    """Simulate every candidate; rows sorted best first (admissible ones before the rest)."""
    rows = []
    cands = candidates(base, budget, eta_max, vpi_max, seed)
    for i, c in enumerate(cands):
        cfg = apply(base, c)
        try:
            m = simulate(trace, cfg, "dora", progress=False).metrics
            ok = all(m[k] == 0 for k in CONSTRAINTS) and m["steps"] >= cfg.steps
            err = ""
        except RuntimeError as e:  # a stall: not admissible
            m, ok, err = {}, False, str(e)
        rows.append({**c, "base": i == 0, "admissible": ok, "e2e_samples_per_s": m.get("e2e_samples_per_s", 0.0),
                     "step_time_mean_s": m.get("step_time_mean_s", float("nan")),
                     "bubble_ratio": m.get("bubble_ratio", float("nan")),
                     "staleness_mean": m.get("staleness_mean", float("nan")), "error": err})
        if progress:
            print(f"  tune {i + 1}/{len(cands)}: {c} -> {rows[-1]['e2e_samples_per_s']:.4g} samples/s"
                  f"{'' if ok else ' (not admissible)'}", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: (not r["admissible"], -r["e2e_samples_per_s"]))
    return rows


def choose(rows: list[dict], min_gain: float) -> dict:
    """The best admissible row, unless it beats an admissible base config by less than `min_gain`
    (a fraction): then the base (a gain inside the simulator's error is no reason to move)."""
    best = rows[0]
    base = next(r for r in rows if r["base"])
    if base["admissible"] and best["e2e_samples_per_s"] < base["e2e_samples_per_s"] * (1 + min_gain):
        return base
    return best


def policy_yaml(base: SimConfig, best: dict, rows: list[dict]) -> str:
    base_row = next(r for r in rows if r["base"])
    dora = asdict(base.policy.dora)
    dora.update({k: best[k] for k in (*GRID, "versions_per_instance")})
    head = (f"# chosen by python -m dora.sim tune on {base.trace}: {best['e2e_samples_per_s']:.4g} simulated samples/s "
            f"(base config {base_row['e2e_samples_per_s']:.4g}); load with python -m dora.exec --policy-config FILE\n")
    return head + yaml.safe_dump({"policy": {"eta": best["eta"], "dora": dora}}, sort_keys=False)


def table(rows: list[dict], top: int = 10) -> str:
    keys = ("eta", *GRID, "versions_per_instance")
    short = {"repartition_load": "repart", "max_regenerations": "max_regen", "versions_per_instance": "vpi"}
    head = " ".join(f"{short.get(k, k):>11}" for k in keys)
    lines = [f"{'rank':>4} {head} {'samples/s':>10} {'step s':>8} {'bubble':>7} {'ok':>3}"]
    for i, r in enumerate(rows[:top]):
        vals = " ".join(f"{str(r[k]):>11}" for k in keys)
        lines.append(f"{i + 1:>4} {vals} {r['e2e_samples_per_s']:>10.4g} {r['step_time_mean_s']:>8.4g} "
                     f"{r['bubble_ratio']:>7.3f} {'yes' if r['admissible'] else 'no':>3}"
                     + ("  (base)" if r["base"] else ""))
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    from dora.sim.cli import parser as sim_parser

    ap = sim_parser()
    ap.prog = "python -m dora.sim tune"
    ap.description = __doc__
    ap.add_argument("--out", metavar="TUNED.yaml", help="write the chosen policy config here")
    ap.add_argument("--csv", metavar="OUT.csv", help="write every candidate's row here")
    ap.add_argument("--budget", type=int, default=24, help="random candidates besides the base config (default 24)")
    ap.add_argument("--eta-max", type=int, help="largest eta to try (default: the base eta)")
    ap.add_argument("--max-versions-per-instance", type=int, default=1,
                    help="largest versions_per_instance to try (default 1: what the executor supports)")
    ap.add_argument("--search-seed", type=int, default=0, help="seed of the random search")
    ap.add_argument("--min-gain", type=float, default=0.05,
                    help="keep the base config unless the best beats it by this fraction (default 0.05: "
                         "about the simulator's error against real runs)")
    return ap


def main(argv: list[str] | None = None) -> int:
    from dora.sim.cli import resolve_config

    args = parser().parse_args(argv)
    with cli_errors("dora.sim tune"):
        if args.policy and args.policy != ["dora"]:
            raise InputError("tune: searches the dora policy's knobs; drop --policy or pass --policy dora")
        if args.out:
            check_output(args.out, ("yaml", "yml"), "--out", "tuned.yaml")
        if args.csv:
            check_output(args.csv, ("csv",), "--csv", "tune.csv")
        if not args.min_gain >= 0:
            raise too_small("--min-gain", args.min_gain, 0)
        if args.budget < 0:
            raise too_small("--budget", args.budget, 0)
        if args.max_versions_per_instance < 1:
            raise too_small("--max-versions-per-instance", args.max_versions_per_instance, 1)
        base = resolve_config(args)
        eta_max = base.policy.eta if args.eta_max is None else args.eta_max
        if eta_max < 0:
            raise too_small("--eta-max", eta_max, 0)
        trace = load_trace(base.trace)
        check_fits(base, trace)
        n = 1 + min(args.budget, search_space(eta_max, args.max_versions_per_instance))
        worst = replace(base, policies=["dora"], policy=replace(base.policy, eta=max(eta_max, base.policy.eta)))
        _, need, seconds = run_estimate(worst, trace)
        check_memory(f"tune candidate with eta {worst.policy.eta:,}", need, "lower --eta-max or --steps")
        check_time(f"tune of {n:,} candidates", n * seconds, "lower --budget or --steps")
        rows = tune(base, trace, args.budget, eta_max, args.max_versions_per_instance, args.search_seed,
                    progress=not args.quiet)
        print(table(rows))
        best = choose(rows, args.min_gain)
        if not best["admissible"]:
            raise InputError("tune: no candidate held C1-C3 over the run; raise --steps or --eta-max, or check "
                             "the cluster shape")
        if args.out:
            write_text(args.out, policy_yaml(base, best, rows))
            print(f"wrote {args.out}", file=sys.stderr)
        if args.csv:
            import pandas as pd

            with atomic_path(args.csv) as tmp:
                pd.DataFrame(rows).to_csv(tmp, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
