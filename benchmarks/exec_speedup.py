"""Real-training comparison: sync vs partial vs dora on the same model, prompts and sample count.

Each (seed, policy) run trains the same warm-started tiny model (built here once, no download) on
the same count-task prompts (task seed fixed) for `--steps` trainer steps of B x G samples, so
every policy trains the same number of samples; the seed changes sampling and the trainer's
shuffling. Per run: wall time, e2e_samples_per_s, bubble_ratio, staleness mean/max, and the
final reward = mean per-step reward over the last 10% of steps (>= 1 step) +- its standard error,
the staleness histogram of the trained trajectories and the per-step means of the importance-sampling
ESS, of the clipped / truncated token fractions and of the k3 KL(proximal || behaviour). Runs of one
--json may differ in --correction (with --merge): they are then labelled policy+correction (e.g.
dora+tis, dora+off) in the table and plot.
The trainer also writes every --eval-every-th version; after each run (outside its wall time) each of
them and the starting model are scored on fixed count-task prompts (dora.exec.tiny_model.eval_score,
same prompts and sampling seed for every checkpoint): `first_eval`, `final_eval`, `eval` per run.
Writes a JSON ({"device", "config", "runs": [...], "summary": {policy: ...}}) and a PNG of the
training reward and of the score against trained samples and against wall time (thick: mean over
seeds; thin: each seed).

Defaults (the configuration of the committed results): the 64-wide 2-layer tiny model warm-started
400 steps with half of the supervised answers counting in the wrong direction (so it starts by
choosing the prompt's direction about half the time, a choice RL learns), B=16 x G=8, 30 steps,
rollout temperature 0.7, AdamW lr 1e-4 with 5 warm-up steps, GRPO with the sequence-mean-of-token-
means loss; each (policy, seed) is one call under the shared lock (`--policy P --seeds 1
--first-seed S --merge`, about 5-7 minutes for sync on 2 cores).

  python benchmarks/exec_speedup.py                              # 3 seeds x sync/partial/dora
  python benchmarks/exec_speedup.py --seeds 1 --steps 20         # shrink it
  python benchmarks/exec_speedup.py --correction off --eta 4 --json r_off.json --plot off.png
  python benchmarks/exec_speedup.py --policy dora --eta 4 --correction off --merge --json r4.json
      # after the same with --correction tis: one file, runs labelled dora+tis / dora+off
  python benchmarks/exec_speedup.py --policy sync --seeds 1 --record --work W   # + W/seed0/{rec,ev}.sync.parquet
  python benchmarks/exec_speedup.py --policy dora --seeds 1 --first-seed 2 --merge   # one run, added
  python benchmarks/exec_speedup.py --quick                      # CI: hf engines in-process, 2 steps
  python benchmarks/exec_speedup.py --local --backend hf --hidden-size 256 ...   # a GPU without vLLM/Ray
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # exec_speedup_report beside this script (the tests load it by path)

from dora.errors import InputError, cli_errors  # noqa: E402
from exec_speedup_report import final_reward, plot, print_table, summarize  # noqa: E402

POLICIES = ("sync", "partial", "dora")
RUN_KEYS = ("policy", "seed", "final_reward", "final_reward_se", "first_reward", "wall_s", "e2e_samples_per_s",
            "bubble_ratio", "staleness_mean", "staleness_max", "trained_samples", "c1_violations",
            "c3_violations")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="benchmarks/exec_speedup.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (default: build a warm-started tiny model in "
                    "--work/model, reused when it exists)")
    ap.add_argument("--policy", action="append", choices=POLICIES, help="policy (repeat; default all three)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per policy (default 3)")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed ... first-seed + seeds - 1")
    ap.add_argument("--merge", action="store_true",
                    help="keep the runs already in --json (same settings) that this call does not redo, so a "
                    "long comparison can run in parts (e.g. one policy and seed per call)")
    ap.add_argument("--steps", type=int, default=30, help="trainer steps per run (default 30)")
    ap.add_argument("--batch-size", type=int, default=16, help="prompt groups per step (default 16)")
    ap.add_argument("--group-size", type=int, default=8, help="samples per prompt (default 8)")
    ap.add_argument("--eta", type=int, default=2, help="staleness bound (default 2)")
    ap.add_argument("--correction", choices=("tis", "mask", "off"), default="tis",
                    help="staleness correction of the loss (default tis)")
    ap.add_argument("--lr", type=float, default=1e-4, help="trainer learning rate (default 1e-4)")
    ap.add_argument("--warmup-steps", type=int, default=5, help="linear lr warm-up steps (default 5)")
    ap.add_argument("--aggregation", choices=("token_mean", "seq_mean_token_mean"), default="seq_mean_token_mean",
                    help="loss aggregation over tokens (default seq_mean_token_mean)")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="sampling temperature of the rollouts and of the score (default 0.7)")
    ap.add_argument("--eval-every", type=int, default=10,
                    help="score the policy every k steps on fixed prompts after the run (0: never; default 10)")
    ap.add_argument("--eval-prompts", type=int, default=64, help="fixed count-task prompts of the score (default 64)")
    ap.add_argument("--eval-samples", type=int, default=4, help="samples per prompt of the score (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=320, help="generation cap (default 320)")
    ap.add_argument("--instances", type=int, default=2, help="rollout engines (default 2)")
    ap.add_argument("--backend", choices=("vllm", "hf"), default="vllm")
    ap.add_argument("--local", action="store_true", help="no Ray: engines and trainer in this process")
    ap.add_argument("--max-num-seqs", type=int, default=32, help="decode slots per engine (default 32)")
    ap.add_argument("--trainer-threads", type=int, default=1, help="torch CPU threads of the trainer (default 1)")
    ap.add_argument("--warm-start-steps", type=int, default=400, help="SFT steps of the built model (default 400)")
    ap.add_argument("--warm-start-reverse-frac", type=float, default=0.5,
                    help="fraction of the built model's SFT answers that count in the other direction, a choice RL "
                    "then learns (default 0.5)")
    ap.add_argument("--hidden-size", type=int, default=64, help="built model width (default 64)")
    ap.add_argument("--layers", type=int, default=2, help="built model layers (default 2)")
    ap.add_argument("--heads", type=int, default=2, help="built model heads (head_dim = hidden/heads)")
    ap.add_argument("--intermediate-size", type=int, default=128)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra ExecConfig override for every run (as python -m dora.exec --set)")
    ap.add_argument("--work", default="out/exec_speedup", help="model, checkpoints and per-step CSVs")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "exec_speedup.json"))
    ap.add_argument("--plot", default=str(REPO / "docs" / "img" / "exec_speedup.png"))
    ap.add_argument("--quick", action="store_true",
                    help="CI check: 1 seed, 2 steps, B=2 x G=2, 24 tokens, untrained model, hf engines in-process")
    ap.add_argument("--record", action="store_true",
                    help="also write each run's event log, recorded trace and exec JSON under --work/seed<S>/ "
                    "(ev.<run>.parquet, rec.<run>.parquet, <run>.json; <run> = policy or policy-correction), "
                    "for python -m dora.sim calibrate / replay (benchmarks/exec_speedup_predict.py)")
    ap.add_argument("--quiet", action="store_true", help="no per-step progress lines")
    return ap


def check_args(args: argparse.Namespace) -> None:
    if args.quick:
        args.seeds, args.steps, args.batch_size, args.group_size = 1, 2, 2, 2
        args.max_new_tokens, args.warm_start_steps, args.local, args.backend = 24, 0, True, "hf"
        args.instances, args.max_num_seqs, args.eval_every, args.eval_prompts, args.eval_samples = 2, 8, 1, 2, 2
    for name in ("seeds", "steps", "batch_size", "group_size", "max_new_tokens", "instances", "max_num_seqs",
                 "eval_prompts", "eval_samples"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.first_seed < 0:
        raise InputError(f"--first-seed: must be >= 0, got {args.first_seed}")
    if args.eta < 0:
        raise InputError(f"--eta: must be >= 0, got {args.eta}")
    if not args.temperature > 0:
        raise InputError(f"--temperature: must be > 0, got {args.temperature}")
    if args.eval_every < 0 or args.warmup_steps < 0:
        raise InputError(f"--eval-every and --warmup-steps: must be >= 0, got {args.eval_every}, {args.warmup_steps}")
    if args.warm_start_steps < 0:
        raise InputError(f"--warm-start-steps: must be >= 0, got {args.warm_start_steps}")
    if not 0.0 <= args.warm_start_reverse_frac < 1.0:
        raise InputError(f"--warm-start-reverse-frac: must be in [0, 1), got {args.warm_start_reverse_frac}")
    if args.model and not Path(args.model).is_dir():
        raise InputError(f"--model {args.model}: not a directory; omit it to build the tiny model")
    for out in (args.json, args.plot):
        if Path(out).is_dir():
            raise InputError(f"output {out}: is a directory; give a file path")


def device_name(args: argparse.Namespace) -> str:
    try:
        import torch

        if torch.cuda.is_available() and (args.backend == "hf" or args.local):
            return f"{torch.cuda.get_device_name(0)} ({args.backend} engines)"
    except ImportError:
        pass
    return f"CPU {platform.machine()} x {os.cpu_count()} cores ({args.backend} engines)"


def ensure_model(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    from dora.exec.tiny_model import build_tiny_model

    d = Path(args.work) / ("model_quick" if args.quick else "model")
    meta = d / "dora_tiny_model.json"
    want = {"warm_start_steps": args.warm_start_steps, "hidden_size": args.hidden_size, "layers": args.layers,
            "heads": args.heads, "intermediate_size": args.intermediate_size}
    if args.warm_start_reverse_frac:
        want["warm_start_reverse_frac"] = args.warm_start_reverse_frac
    if meta.is_file() and (d / "build.json").is_file() and json.loads((d / "build.json").read_text()) == want:
        return str(d)
    print(f"building the tiny model in {d} ({args.warm_start_steps} warm-start steps)", file=sys.stderr, flush=True)
    build_tiny_model(d, hidden_size=args.hidden_size, layers=args.layers, heads=args.heads,
                     kv_heads=max(1, args.heads // 2), intermediate_size=args.intermediate_size,
                     warm_start_steps=args.warm_start_steps, progress=not args.quiet,
                     warm_start_reverse_frac=args.warm_start_reverse_frac)
    (d / "build.json").write_text(json.dumps(want) + "\n")
    return str(d)


def run_name(policy: str, correction: str) -> str:
    """File and directory name of a run: the policy, with the correction when it is not the default (tis)."""
    return policy if correction == "tis" else f"{policy}-{correction}"


def staleness_hist(events) -> dict[int, int]:
    """Trained trajectories per staleness (trainer version at training - generating version, as
    `dora.metrics` counts it), from an event log."""
    import numpy as np

    from dora.metrics import staleness

    vals, counts = np.unique(staleness(events), return_counts=True)
    return {int(v): int(c) for v, c in zip(vals, counts)}


def run_dir(args: argparse.Namespace, policy: str, seed: int) -> Path:
    """--out of the run's executor: --work/seed<S> (default correction) or --work/seed<S>/<correction>;
    the executor writes <that>/<policy>/ (steps.csv, profile.json, checkpoint)."""
    d = Path(args.work) / f"seed{seed}"
    return d if args.correction == "tis" else d / args.correction


def exec_config(args: argparse.Namespace, model: str, policy: str, seed: int):
    from dora.config import apply_cli, build
    from dora.exec.run_config import ExecConfig

    data = {
        "model": model, "policies": [policy], "steps": args.steps, "seed": seed,
        "out": str(run_dir(args, policy, seed)), "runtime": "local" if args.local else "ray",
        "rollout": {"instances": args.instances, "backend": args.backend, "max_num_seqs": args.max_num_seqs,
                    "temperature": args.temperature},
        "trainer": {"lr": args.lr, "warmup_steps": args.warmup_steps, "threads": args.trainer_threads, "seed": seed,
                    "loss": {"correction": args.correction, "aggregation": args.aggregation},
                    "snapshot_every": args.eval_every, "snapshot_dir": str(snapshot_dir(args, policy, seed))},
        "task": {"max_new_tokens": args.max_new_tokens, "seed": 0},
        "policy": {"eta": args.eta, "batch_size": args.batch_size, "group_size": args.group_size},
    }
    return build(ExecConfig, apply_cli(data, {}, args.set))


def snapshot_dir(args: argparse.Namespace, policy: str, seed: int) -> Path:
    return run_dir(args, policy, seed).resolve() / f"{policy}-snapshots"


def score(args: argparse.Namespace, model_dir: str) -> dict:
    """The fixed-prompt score of a checkpoint (dora.exec.tiny_model.eval_score), one torch thread."""
    import torch

    from dora.exec.tiny_model import eval_score

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, args.trainer_threads))
    try:
        return eval_score(model_dir, prompts=args.eval_prompts, samples=args.eval_samples,
                          max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    finally:
        torch.set_num_threads(threads)


_BASE_SCORE: dict[str, dict] = {}


def eval_curve(args: argparse.Namespace, model: str, policy: str, seed: int, t_of_step: dict[int, float]) -> list[dict]:
    """Score of the starting model and of every --eval-every-th version (snapshots written by the trainer);
    computed after the run, so it costs no run time."""
    if not args.eval_every:
        return []
    if model not in _BASE_SCORE:
        _BASE_SCORE[model] = score(args, model)
    per_step = args.batch_size * args.group_size
    out = [{"step": 0, "trained_samples": 0, "t_s": 0.0, **_BASE_SCORE[model]}]
    snaps = snapshot_dir(args, policy, seed)
    for k in range(args.eval_every, args.steps + 1, args.eval_every):
        if (snaps / f"v{k}").is_dir():
            out.append({"step": k, "trained_samples": k * per_step, "t_s": t_of_step.get(k, float("nan")),
                        **score(args, str(snaps / f"v{k}"))})
    return [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()} for row in out]


def step_mean(curve: list[dict], key: str) -> float:
    """Mean of a per-step value over the run's steps (nan for no steps)."""
    return sum(p[key] for p in curve) / len(curve) if curve else float("nan")


def record(args: argparse.Namespace, res, seed: int) -> None:
    """--record: the run's event log, recorded trace and {"runs": [{policy, config, metrics}]} under --work/seed<S>/."""
    from dora.eventlog import write_events
    from dora.exec.recorded import write_recorded_trace

    d = Path(args.work) / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    name = run_name(res.policy, args.correction)
    write_events(res.events, d / f"ev.{name}.parquet")
    write_recorded_trace(res, d / f"rec.{name}.parquet")
    write_json({"runs": [{"policy": res.policy, "config": res.config, "metrics": res.metrics,
                          "profile": str(run_dir(args, res.policy, seed) / res.policy / "profile.json")}]},
               str(d / f"{name}.json"))


def one_run(args: argparse.Namespace, model: str, policy: str, seed: int) -> dict:
    import shutil

    from dora.exec.run import run_policies

    shutil.rmtree(snapshot_dir(args, policy, seed), ignore_errors=True)
    (res,) = run_policies(exec_config(args, model, policy, seed), progress=not args.quiet)
    m = res.metrics
    rewards = [float(s["reward_mean"]) for s in res.steps]
    fr, fr_se = final_reward(rewards)
    per_step = args.batch_size * args.group_size
    curve = [{"step": int(s["step"]), "t_s": round(float(s["t_s"]), 3), "trained_samples": int(s["step"]) * per_step,
              "reward": round(float(s["reward_mean"]), 5), "is_ess": round(float(s.get("is_ess", 1.0)), 5),
              "clip_frac": round(float(s.get("clip_frac", 0.0)), 5),
              "is_truncated_frac": round(float(s.get("is_truncated_frac", 0.0)), 5),
              "kl_prox_behav": round(float(s.get("kl_prox_behav", 0.0)), 7),
              "staleness_mean": round(float(s.get("staleness_mean", 0.0)), 3),
              "zero_var_groups": round(float(s.get("zero_var_groups", 0.0)), 4),
              "response_len_mean": round(float(s.get("response_len_mean", 0.0)), 2),
              "grad_norm": round(float(s.get("grad_norm", 0.0)), 4)} for s in res.steps]
    if args.record:
        record(args, res, seed)
    return {"policy": policy, "correction": args.correction, "seed": seed, "final_reward": fr, "final_reward_se": fr_se,
            "first_reward": rewards[0] if rewards else float("nan"), "wall_s": float(m["wall_s"]),
            "e2e_samples_per_s": float(m["e2e_samples_per_s"]), "bubble_ratio": float(m["bubble_ratio"]),
            "staleness_mean": float(m["staleness_mean"]), "staleness_max": float(m["staleness_max"]),
            "trained_samples": int(m["trained_samples"]), "c1_violations": int(m["c1_violations"]),
            "c3_violations": int(m["c3_violations"]),
            "staleness_hist": {str(k): v for k, v in staleness_hist(res.events).items()},
            "is_ess_mean": step_mean(curve, "is_ess"), "clip_frac_mean": step_mean(curve, "clip_frac"),
            "is_truncated_frac_mean": step_mean(curve, "is_truncated_frac"),
            "kl_prox_behav_mean": step_mean(curve, "kl_prox_behav"), "curve": curve, "eval": [],
            "first_eval": float("nan"), "final_eval": float("nan")}


def add_eval(args: argparse.Namespace, model: str, run: dict) -> None:
    """Score the run's snapshots (eval_curve) into `eval`, `first_eval`, `final_eval`."""
    evals = eval_curve(args, model, run["policy"], run["seed"], {p["step"]: p["t_s"] for p in run["curve"]})
    run.update(eval=evals, first_eval=evals[0]["score"] if evals else float("nan"),
               final_eval=evals[-1]["score"] if len(evals) > 1 else float("nan"))


SETTINGS = ("model", "steps", "batch_size", "group_size", "eta", "correction", "lr", "warmup_steps", "aggregation",
            "temperature", "eval_every", "eval_prompts", "eval_samples", "max_new_tokens", "instances",
            "backend", "local", "max_num_seqs", "trainer_threads", "warm_start_steps", "warm_start_reverse_frac",
            "hidden_size", "layers", "heads", "intermediate_size", "set")


def earlier_runs(args: argparse.Namespace, redo: set[tuple[str, int]]) -> tuple[list[dict], list[str]]:
    """--merge: the runs of --json not redone now and the commands that made them; refused when that
    file was made with other settings (--correction may differ: runs are told apart by policy, correction
    and seed; a run without a `correction` field has its file's)."""
    p = Path(args.json)
    if not args.merge or not p.is_file():
        return [], []
    try:
        doc = json.loads(p.read_text())
        old, runs, commands = doc["config"], doc["runs"], list(doc["commands"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputError(f"--merge: {p} is not a result of this benchmark ({e}); remove it or drop --merge") from None
    diff = [k for k in SETTINGS if k != "correction" and old.get(k) != vars(args).get(k)]
    if diff:
        raise InputError(f"--merge: {p} was made with other settings ({', '.join(diff)}); use the same ones "
                         "or another --json")
    file_corr = old.get("correction", "tis")
    if file_corr != "tis":  # a run without the field is read as tis (run_labels): give it its file's
        runs = [{"correction": file_corr, **r} for r in runs]
    return [r for r in runs if (r["policy"], r["seed"]) not in redo
            or r.get("correction", "tis") != args.correction], commands


def write_json(doc: dict, path: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, p)


def result_doc(args: argparse.Namespace, argv: list[str] | None, runs: list[dict], commands: list[str]) -> dict:
    n_seeds = len({r["seed"] for r in runs})
    corrections = "/".join(dict.fromkeys(r.get("correction", args.correction) for r in runs)) or args.correction
    model = args.model or "tiny model"
    title = (f"{Path(model).name}: {args.instances} {args.backend} engines x {args.max_num_seqs} slots, "
             f"B={args.batch_size} x G={args.group_size}, {args.steps} steps, eta={args.eta}, "
             f"correction={corrections}, "
             f"lr={args.lr:g}, T={args.temperature:g}, {n_seeds} seed(s); {device_name(args)}"
             + (f"\nscore: {args.eval_prompts} fixed prompts x {args.eval_samples} samples every "
                f"{args.eval_every} steps"
                if args.eval_every else ""))
    return {"device": device_name(args), "title": title,
            "commands": commands + ["python benchmarks/exec_speedup.py "
                                    + " ".join(argv if argv is not None else sys.argv[1:])],
            "config": {k: v for k, v in vars(args).items() if k in SETTINGS},
            "runs": runs, "summary": summarize(runs)}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("benchmarks/exec_speedup.py"):
        check_args(args)
        policies = args.policy or list(POLICIES)
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        runs, commands = earlier_runs(args, {(p, s) for p in policies for s in seeds})
        model = ensure_model(args)
        exec_config(args, model, policies[0], 0)  # bad --set values fail here, before any run
        todo = len(seeds) * len(policies)
        t0 = time.perf_counter()
        for seed in seeds:
            for pol in policies:
                print(f"[{pol} seed {seed}, {todo} run(s) in this call] "
                      f"({time.perf_counter() - t0:.0f} s so far)", file=sys.stderr, flush=True)
                runs.append(one_run(args, model, pol, seed))
                write_json(result_doc(args, argv, runs, commands), args.json)  # a later failure keeps this run
                if args.eval_every:
                    add_eval(args, model, runs[-1])
                    write_json(result_doc(args, argv, runs, commands), args.json)
        runs.sort(key=lambda r: (r["seed"], POLICIES.index(r["policy"]), r.get("correction", "tis") != "tis",
                                 r.get("correction", "tis")))
        doc = result_doc(args, argv, runs, commands)
        print_table(doc["summary"], doc["title"])
        write_json(doc, args.json)
        plot(runs, args.plot, doc["title"])
        print(f"wrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
