"""Does the simulator predict the real training speedup? Calibrate on recorded exec_speedup runs, replay, compare.

Input: one seed's recorded runs of benchmarks/exec_speedup.py --record (the learn configuration: sync and
dora, 2 vLLM engines x 32 slots, B = 16 x G = 8, eta 2, 30 steps):

  python benchmarks/exec_speedup.py --policy sync --seeds 1 --record --merge --work out/exec_predict \\
      --json out/exec_predict/runs.json --plot out/exec_predict/runs.png      # and the same with --policy dora
  python benchmarks/exec_speedup_predict.py --runs out/exec_predict/seed0 --out out/exec_predict/sim \\
      --json benchmarks/results/exec_speedup_predict.json --plot docs/img/exec_speedup_predict.png

For each calibration source (`sync`: every policy priced by the cost fitted on the sync run's profile,
the realistic use: calibrate on what you run today, predict the other policy; `own`: each policy on
its own profile, an in-sample check) and each host model (`--host-cores 0`: the cost model's devices
of their own; `2`: the engines and the trainer share this machine's 2 cores), it runs `python -m
dora.sim calibrate` and replays each policy's recorded trace on the run's cluster shape (exactly
benchmarks/sim2real.py's replay flags: its instances and slots, one trainer device, B, eta, steps,
sync disaggregated, dora's migrations re-prefill), then compares the real and simulated event logs with
the same metrics code. Prints every command it runs and a markdown table of real vs predicted
e2e samples/s per policy and of the dora/sync ratio; writes the JSON (with the simulator's bubble-free
bound per replay and per-run diagnostics from the profiles: trainer step time, decode step time with
the trainer busy vs idle, bubble ratios).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from dora.errors import InputError, cli_errors  # noqa: E402

CALIBRATIONS = ("sync", "own")
METRICS = ("e2e_samples_per_s", "step_time_mean_s", "bubble_ratio", "staleness_mean")


def rel_err(real: float, pred: float) -> float:
    """`dora.sim.tools.compare.rel_err`, with nan where it has no answer (for tables and JSON)."""
    from dora.sim.tools.compare import rel_err as compare_rel_err

    e = compare_rel_err(real, pred)
    return float("nan") if e is None else e


def ratio(a: float, b: float) -> float:
    """a / b, nan when b is 0 or not finite."""
    return a / b if math.isfinite(a) and math.isfinite(b) and b != 0 else float("nan")


def prediction_rows(results: dict, base: str = "sync", other: str = "dora") -> list[dict]:
    """One row per scenario of results = {scenario: {policy: {"real": {metric: v}, "sim": {metric: v}}}}: real
    and predicted e2e samples/s of base and other, their errors, and the other/base ratio, real and predicted."""
    rows = []
    key = "e2e_samples_per_s"
    for scen, per in results.items():
        row = {"scenario": scen}
        for pol in (base, other):
            real, sim = float(per[pol]["real"][key]), float(per[pol]["sim"][key])
            row[f"{pol}_real"], row[f"{pol}_pred"], row[f"{pol}_err"] = real, sim, rel_err(real, sim)
        row["ratio_real"] = ratio(row[f"{other}_real"], row[f"{base}_real"])
        row["ratio_pred"] = ratio(row[f"{other}_pred"], row[f"{base}_pred"])
        row["ratio_err"] = rel_err(row["ratio_real"], row["ratio_pred"])
        rows.append(row)
    return rows


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1%}"


def markdown_table(rows: list[dict], base: str = "sync", other: str = "dora") -> str:
    """The rows of prediction_rows as a markdown table (samples/s real / predicted (error), ratio real / predicted)."""
    head = (f"| calibration, host model | {base} samples/s real / pred (err) | {other} samples/s real / pred (err) "
            f"| {other}/{base} real / pred (err) |")
    lines = [head, "|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[f'{p}_real']:.2f} / {r[f'{p}_pred']:.2f} ({_pct(r[f'{p}_err'])})" for p in (base, other)]
        cells.append(f"{r['ratio_real']:.2f}x / {r['ratio_pred']:.2f}x ({_pct(r['ratio_err'])})")
        lines.append(f"| {r['scenario']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scenario_name(calib: str, host_cores: float) -> str:
    src = "sync's profile" if calib == "sync" else "own profile"
    host = "own devices" if not host_cores else f"{host_cores:g} shared cores"
    return f"{src}, {host}"


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def profile_diagnosis(profile: dict, min_running: int = 9) -> dict:
    """What the 2 cores did: trainer step seconds (mean, share of the wall), and the median vLLM step time
    with >= min_running sequences while a trainer step ran vs while none did (needs train_windows/t0_wall_s)."""
    tr = [float(x) for x in profile["train_steps"]["dt_s"]]
    wall = float(profile.get("wall_s", float("nan")))
    out = {"train_steps": len(tr), "train_step_mean_s": sum(tr) / len(tr) if tr else float("nan"),
           "train_share_of_wall": sum(tr) / wall if tr and wall > 0 else float("nan"), "wall_s": wall}
    win = profile.get("train_windows") or {}
    t0 = profile.get("t0_wall_s")
    d = profile["decode_steps"]
    busy, idle = [], []
    if win and t0 is not None:
        spans = list(zip(win["t_start_s"], win["t_end_s"]))
        for t, run, dt in zip(d["t_s"], d["running"], d["dt_s"]):
            if dt <= 0 or run < min_running:
                continue
            rel = float(t) - float(t0)
            (busy if any(a <= rel <= b for a, b in spans) else idle).append(float(dt))
    out.update({"decode_step_trainer_busy_s": _median(busy), "decode_step_trainer_idle_s": _median(idle),
                "decode_steps_busy": len(busy), "decode_steps_idle": len(idle)})
    out["decode_slowdown_while_training"] = ratio(out["decode_step_trainer_busy_s"], out["decode_step_trainer_idle_s"])
    out.update(other_engine_effect(d))
    return out


def other_engine_effect(d: dict, max_running: int = 8, bin_s: float = 0.05) -> dict:
    """Median step time of an engine with 1..max_running sequences while another engine also stepped (in the
    same bin_s window) vs while no other engine did: on a shared host a lone engine gets the idle cores."""
    active: dict[int, set[int]] = {}
    for i, t, dt in zip(d["instance"], d["t_s"], d["dt_s"]):
        if dt > 0:
            active.setdefault(int(i), set()).add(int(float(t) // bin_s))
    shared, alone = [], []
    for i, t, run, dt in zip(d["instance"], d["t_s"], d["running"], d["dt_s"]):
        if dt <= 0 or not 1 <= run <= max_running:
            continue
        b = int(float(t) // bin_s)
        others = any(b in bins for j, bins in active.items() if j != int(i))
        (shared if others else alone).append(float(dt))
    return {"tail_step_other_engine_busy_s": _median(shared), "tail_step_other_engine_idle_s": _median(alone),
            "tail_steps_other_busy": len(shared), "tail_steps_other_idle": len(alone)}


def load_runs(runs_dir: Path, policies: tuple[str, ...]) -> dict:
    """Per policy: its exec JSON run, recorded trace, event log and profile paths (refused when one is missing)."""
    out = {}
    for p in policies:
        j = runs_dir / f"{p}.json"
        files = {"json": j, "trace": runs_dir / f"rec.{p}.parquet", "events": runs_dir / f"ev.{p}.parquet"}
        for what, f in files.items():
            if not f.is_file():
                raise InputError(f"--runs {runs_dir}: no {f.name} ({what}); record the run with "
                                 f"benchmarks/exec_speedup.py --policy {p} --record")
        try:
            run = json.loads(j.read_text())["runs"][0]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
            raise InputError(f"{j}: not an exec_speedup --record JSON ({e}); record the run again") from None
        prof = Path(run.get("profile") or runs_dir / p / "profile.json")
        if not prof.is_file():
            prof = runs_dir / p / "profile.json"
        if not prof.is_file():
            raise InputError(f"--runs {runs_dir}: no profile of {p} ({prof}); record the run again")
        out[p] = {**files, "run": run, "profile": prof}
    return out


def _sim(cmd: list[str]) -> None:
    from dora.sim.__main__ import main as sim

    print("python -m dora.sim " + " ".join(cmd), flush=True)
    if sim(cmd) != 0:
        raise SystemExit(1)


def predict(runs: dict, out: Path, host_cores_list: list[float], base: str, other: str) -> dict:
    """Calibrate, replay and compare every (calibration, host model) scenario; {scenario: {policy: compare}}."""
    from dora.sim.tools.compare import compare_files
    from sim2real import replay_args

    results: dict[str, dict] = {}
    for hc in host_cores_list:
        tag = f"host{hc:g}"
        costs = {}
        for p in (base, other):  # one cost file per profile and host model
            costs[p] = out / f"cost.{p}.{tag}.yaml"
            _sim(["calibrate", str(runs[p]["profile"]), "--out", str(costs[p]), "--host-cores", str(hc)])
        for calib in CALIBRATIONS:
            scen = scenario_name(calib, hc)
            results[scen] = {}
            for p in (base, other):
                cost = costs[base] if calib == "sync" else costs[p]
                sim_ev, sim_json = out / f"sim.{p}.{calib}.{tag}.parquet", out / f"sim.{p}.{calib}.{tag}.json"
                _sim(replay_args(runs[p]["run"], runs[p]["trace"], cost, p, sim_ev) + ["--json", str(sim_json)])
                res = compare_files(runs[p]["events"], sim_ev)
                bound = json.loads(sim_json.read_text())["runs"][0]["metrics"]["bound_samples_per_s"]
                results[scen][p] = {"real": {k: res["real"][k] for k in METRICS},
                                    "sim": {k: res["sim"][k] for k in METRICS},
                                    "bound_samples_per_s": float(bound), "cost": cost.name,
                                    "sim_events": sim_ev.name}
    return results


def plot(rows: list[dict], path: str, title: str, base: str, other: str) -> None:
    """Bars: real vs predicted samples/s per policy and the other/base ratio, per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(rows))
    w = 0.2
    for i, (p, col) in enumerate(((base, "tab:gray"), (other, "tab:red"))):
        axes[0].bar(x + (2 * i - 1.5) * w, [r[f"{p}_real"] for r in rows], w, color=col, label=f"{p} real")
        axes[0].bar(x + (2 * i - 0.5) * w, [r[f"{p}_pred"] for r in rows], w, color=col, alpha=0.45, hatch="//",
                    label=f"{p} predicted")
    axes[0].set_ylabel("e2e samples/s")
    axes[1].bar(x - w / 2, [r["ratio_real"] for r in rows], w, color="tab:red", label="real")
    axes[1].bar(x + w / 2, [r["ratio_pred"] for r in rows], w, color="tab:red", alpha=0.45, hatch="//",
                label="predicted")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_ylabel(f"{other} / {base} samples/s")
    for ax in axes:
        ax.set_xticks(x, [r["scenario"].replace(", ", ",\n") for r in rows], fontsize=7)
        ax.grid(alpha=0.3, axis="y")
        ax.set_ylim(top=ax.get_ylim()[1] * 1.25)  # room for the legend above the bars
        ax.legend(fontsize=7, loc="upper center", ncol=4)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    from dora.plots.style import save

    save(fig, path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="benchmarks/exec_speedup_predict.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="one seed's directory of exec_speedup.py --record runs "
                    "(<work>/seed<S>: <policy>.json, rec.<policy>.parquet, ev.<policy>.parquet, <policy>/profile.json)")
    ap.add_argument("--out", required=True, help="directory for the cost files and simulated event logs")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "exec_speedup_predict.json"))
    ap.add_argument("--plot", metavar="OUT.png", help="bars of real vs predicted samples/s and ratio")
    ap.add_argument("--base", default="sync", help="the reference policy (default sync)")
    ap.add_argument("--other", default="dora", help="the policy whose speedup over --base is predicted (default dora)")
    ap.add_argument("--host-cores", type=float, action="append", metavar="N",
                    help="host models to try (repeat; default 0 and 2: own devices, 2 shared cores)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("benchmarks/exec_speedup_predict.py"):
        host = args.host_cores if args.host_cores else [0.0, 2.0]
        if any(h < 0 for h in host):
            raise InputError(f"--host-cores: must be >= 0, got {host}")
        if args.base == args.other:
            raise InputError(f"--base and --other: must differ, both are {args.base}")
        if Path(args.json).is_dir() or (args.plot and Path(args.plot).is_dir()):
            raise InputError("--json/--plot: is a directory; give a file path")
        runs = load_runs(Path(args.runs), (args.base, args.other))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        results = predict(runs, out, host, args.base, args.other)
        rows = prediction_rows(results, args.base, args.other)
        md = markdown_table(rows, args.base, args.other)
        from dora.profile import read_profile

        diag = {p: {**profile_diagnosis(read_profile(str(runs[p]["profile"]))),
                    **{k: float(runs[p]["run"]["metrics"][k]) for k in
                       ("bubble_ratio", "rollout_bubble_ratio", "trainer_bubble_ratio", "step_time_mean_s",
                        "e2e_samples_per_s", "staleness_mean")}}
                for p in (args.base, args.other)}
        c = runs[args.base]["run"]["config"]
        title = (f"exec_speedup learn configuration, seed run {Path(args.runs).name}: {c['instances']} engines x "
                 f"{c['max_seqs']} slots, B={c['batch_size']}, eta={c['eta']}, {c['steps']} steps; "
                 "real vs simulated (calibrated) e2e samples/s")
        print("\n" + md)
        print("\nper run (real): " + json.dumps(diag, indent=1, default=float))
        doc = {"title": title, "command": "python benchmarks/exec_speedup_predict.py "
               + " ".join(argv if argv is not None else sys.argv[1:]),
               "inputs": {p: {k: str(v) for k, v in runs[p].items() if k != "run"} for p in runs},
               "scenarios": results, "table": rows, "markdown": md, "diagnosis": diag}
        p = Path(args.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=float) + "\n")
        os.replace(tmp, p)
        if args.plot:
            plot(rows, args.plot, title, args.base, args.other)
        print(f"wrote {args.json}" + (f" and {args.plot}" if args.plot else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
