"""python -m dora.sim compare: a real run's metrics beside a simulated replay's, with relative errors.

  python -m dora.sim compare real_events.parquet sim_events.parquet [--json OUT]

Both files are event logs (`python -m dora.exec ... --events`, `python -m dora.sim ... --events`);
their metrics come from the same code (dora.metrics.compute_metrics). The relative error of a
metric is (sim - real) / |real| as a signed fraction (0 when both are 0, null when only real is 0).
`--json` writes {"real": {...}, "sim": {...}, "rel_err": {...}} for the four headline metrics
(step_time_mean_s, e2e_samples_per_s, bubble_ratio, staleness_mean); the table also shows a few
more for diagnosis, and the mean duration of the activities the cost model prices (train step,
weight load, publication, first-segment seconds per token) to show which term is off.
`--max-rel-err X` exits with status 1 when a headline |error| exceeds X.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from dora.errors import ArgumentParser, InputError, cli_errors, too_small
from dora.eventlog import read_events
from dora.io import check_output, write_text
from dora.metrics import compute_metrics

HEADLINE = ("step_time_mean_s", "e2e_samples_per_s", "bubble_ratio", "staleness_mean")
EXTRA = ("step_time_p99_s", "rollout_bubble_ratio", "trainer_bubble_ratio", "waste_ratio", "e2e_tokens_per_s",
         "trained_samples", "steps", "weight_loads", "migrations", "reprefill_tokens")


def rel_err(real: float, sim: float) -> float | None:
    if math.isnan(real) or math.isnan(sim):
        return None
    if real == 0:
        return 0.0 if sim == 0 else None
    return (sim - real) / abs(real)


def compare_metrics(real: dict, sim: dict) -> dict:
    keys = HEADLINE + EXTRA
    return {"real": {k: real[k] for k in keys}, "sim": {k: sim[k] for k in keys},
            "rel_err": {k: rel_err(float(real[k]), float(sim[k])) for k in keys}}


def activity_times(df) -> dict:
    """Mean seconds of the activities the cost model prices, from an event log (for diagnosis):
    train step compute, weight load, publication, and a trajectory's first segment (dispatch to
    its end: queueing + prefill + decode) per token it made."""
    ev = df["event"].astype(str).to_numpy()
    dur = df["dur_s"].to_numpy()

    def mean(name: str) -> float:
        x = dur[ev == name]
        return float(x.mean()) if len(x) else float("nan")

    fin = ev == "finish"
    tok = df["tokens"].to_numpy()[fin]
    per_tok = float(dur[fin].sum() / tok.sum()) if tok.sum() > 0 else float("nan")
    return {"train_step_s": mean("train_end"), "weight_load_s": mean("load_end"), "publish_s": mean("publish"),
            "segment_s_per_token": per_tok}


def compare_files(real_path: str | Path, sim_path: str | Path) -> dict:
    out, acts = {}, {}
    for key, p in (("real", real_path), ("sim", sim_path)):
        df = read_events(p)
        if not df.attrs.get("run"):
            raise InputError(f"event log {p}: no run metadata (dora.run); write it with --events of dora.sim/dora.exec")
        out[key] = compute_metrics(df)
        acts[key] = activity_times(df)
    res = compare_metrics(out["real"], out["sim"])
    res["activities"] = {k: {"real": acts["real"][k], "sim": acts["sim"][k],
                             "rel_err": rel_err(acts["real"][k], acts["sim"][k])} for k in acts["real"]}
    res["files"] = {"real": str(real_path), "sim": str(sim_path)}
    return res


def table(res: dict) -> str:
    def num(v: float) -> str:
        return f"{v:,.4g}" if isinstance(v, float) else f"{v:,}"

    lines = [f"{'metric':<22} {'real':>12} {'sim':>12} {'rel err':>9}"]
    for k in HEADLINE + EXTRA:
        e = res["rel_err"][k]
        es = "n/a" if e is None else f"{e:+.1%}"
        lines.append(f"{k:<22} {num(res['real'][k]):>12} {num(res['sim'][k]):>12} {es:>9}" + ("" if k in HEADLINE
                                                                                                 else "  (extra)"))
    for k, a in res.get("activities", {}).items():
        e = a["rel_err"]
        lines.append(f"{k:<22} {a['real']:>12.4g} {a['sim']:>12.4g} {'n/a' if e is None else f'{e:+.1%}':>9}  (mean)")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.sim compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("real", metavar="REAL_EVENTS", help="event log of the real run (python -m dora.exec --events)")
    ap.add_argument("sim", metavar="SIM_EVENTS", help="event log of the simulated replay (python -m dora.sim --events)")
    ap.add_argument("--json", metavar="OUT", help='write {"real", "sim", "rel_err"} here')
    ap.add_argument("--max-rel-err", type=float, metavar="X",
                    help="exit 1 when a headline metric's |relative error| exceeds X (e.g. 0.1)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("dora.sim compare"):
        if args.json:
            check_output(args.json, ("json",), "--json", "compare.json")
        if args.max_rel_err is not None and not args.max_rel_err >= 0:
            raise too_small("--max-rel-err", args.max_rel_err, 0)
        res = compare_files(args.real, args.sim)
        print(table(res))
        if args.json:
            write_text(args.json, json.dumps(res, indent=2, default=float))
    if args.max_rel_err is not None:
        bad = [k for k in HEADLINE if res["rel_err"][k] is None or abs(res["rel_err"][k]) > args.max_rel_err]
        if bad:
            print(f"dora.sim compare: {', '.join(bad)} off by more than {args.max_rel_err:.0%}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
