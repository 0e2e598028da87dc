"""python -m dora.exec: real RL training with vLLM (or transformers) engines and a torch trainer on Ray,
scheduled by the same policies as the simulator.

Examples:
  python -m dora.exec.tiny_model --out /tmp/tiny --warm-start-steps 300
  python -m dora.exec --model /tmp/tiny                                   # dora, count task, 2 engines
  python -m dora.exec --model /tmp/tiny --policy sync --policy dora --steps 5 --json out.json --events ev.parquet
  python -m dora.exec --model Qwen/Qwen2.5-7B --dataset math.parquet --backend vllm --ray-address auto

Precedence: built-in defaults < --config YAML < --policy-config YAML (the `policy:` section, e.g. from
`python -m dora.sim tune`) < the flags < --set KEY=VALUE (dotted keys of ExecConfig).
"""

from __future__ import annotations

import argparse
import sys

from dora.config import apply_cli, build, deep_merge, load_yaml
from dora.errors import ArgumentParser, InputError, cli_errors
from dora.exec.model_ref import resolve_model
from dora.exec.run_config import ExecConfig, check_engines_fit
from dora.io import check_output, check_output_dir
from dora.sched.registry import names as policy_names


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.exec", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="local HF checkpoint directory or hub id")
    ap.add_argument("--policy", action="append", choices=policy_names(), help="policy (repeat to run several in turn)")
    ap.add_argument("--config", help="YAML file with ExecConfig keys")
    ap.add_argument("--policy-config", help="YAML file with PolicyConfig keys (eta, batch_size, dora: {...})")
    ap.add_argument("--instances", type=int, help="rollout engines")
    ap.add_argument("--backend", choices=("vllm", "hf"), help="engine backend (default vllm)")
    ap.add_argument("--eta", type=int, help="staleness bound")
    ap.add_argument("--steps", type=int, help="trainer steps")
    ap.add_argument("--batch-size", type=int, help="prompt groups per trainer step (B)")
    ap.add_argument("--group-size", type=int, help="samples per prompt (G)")
    ap.add_argument("--dataset", help="'count' (built-in synthetic task) or a .parquet/.jsonl file of prompt, answer")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--out", help="directory for checkpoints and per-step CSV logs (default out/exec)")
    ap.add_argument("--ray-address", help="join an existing Ray cluster (default: start a local one)")
    ap.add_argument("--local", action="store_true", help="no Ray: run engines and trainer in this process")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any config key")
    ap.add_argument("--json", metavar="OUT", help="write {runs: [{policy, config, metrics}]} here")
    ap.add_argument("--events", metavar="OUT.parquet", help="event log (several policies: OUT.<policy>.parquet)")
    ap.add_argument("--trace-out", metavar="OUT.parquet", help="the trained trajectories as a trace (the trace schema "
                    "with the recorded-run columns; several policies: OUT.<policy>.parquet)")
    ap.add_argument("--profile-out", metavar="OUT.json", help="timing profile for python -m dora.sim calibrate "
                    "(several policies: OUT.<policy>.json; always also written as <out>/<policy>/profile.json)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap


def resolve_config(args: argparse.Namespace) -> ExecConfig:
    data: dict = load_yaml(args.config) if args.config else {}
    if args.policy_config:
        pol = load_yaml(args.policy_config, "policy config")
        pol = pol["policy"] if "policy" in pol else pol
        if not isinstance(pol, dict):
            raise InputError(f"policy config {args.policy_config}: 'policy' must be a mapping of PolicyConfig keys, "
                             f"got {pol!r}; write it as policy: {{eta: 2, batch_size: 8, dora: {{...}}}}")
        data = deep_merge(data, {"policy": pol})
    flags = {("model",): args.model, ("steps",): args.steps, ("seed",): args.seed, ("out",): args.out,
             ("ray_address",): args.ray_address, ("rollout", "instances"): args.instances,
             ("rollout", "backend"): args.backend, ("policy", "eta"): args.eta,
             ("policy", "batch_size"): args.batch_size, ("policy", "group_size"): args.group_size,
             ("task", "dataset"): args.dataset}
    if args.policy:
        data["policies"] = args.policy
    if args.local:
        data["runtime"] = "local"
    return build(ExecConfig, apply_cli(data, flags, args.set))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with cli_errors("dora.exec"):
        cfg = resolve_config(args)
        for flag, out, suffix in (("--json", args.json, "json"), ("--events", args.events, "parquet"),
                                  ("--trace-out", args.trace_out, "parquet"),
                                  ("--profile-out", args.profile_out, "json")):
            if out:
                check_output(out, (suffix,), flag, f"out.{suffix}")
        check_output_dir(cfg.out, "--out")
        cfg.model = resolve_model(cfg.model)
        check_engines_fit(cfg)
        if cfg.task.dataset != "count":
            from dora.exec.tasks import load_dataset

            load_dataset(cfg.task.dataset)  # refuse a bad dataset before any engine starts
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401

            if cfg.runtime == "ray":
                import ray  # noqa: F401
        except ImportError as e:
            raise InputError(f"the executor needs its extra ({e.name} is missing); install it: pip install -e "
                             "'.[exec]' (CPU machines: '.[exec-cpu]')") from None
        from dora.eventlog import events_path, write_events
        from dora.exec.run import run_policies
        from dora.report import EXEC_ROWS, add_ratios, table, write_json

        results = run_policies(cfg, progress=not args.quiet)
        runs = [{"policy": r.policy, "config": r.config, "metrics": r.metrics} for r in results]
        add_ratios(runs)
        r = cfg.rollout
        print(table(runs, f"{cfg.model}: {r.instances} {r.backend} engines x {r.max_num_seqs} slots, 1 trainer; "
                          f"B={cfg.policy.batch_size} x G={cfg.policy.group_size}, eta={cfg.policy.eta}, "
                          f"{cfg.steps} steps, task {cfg.task.dataset}", rows=EXEC_ROWS))
        several = len(results) > 1
        if args.json:
            write_json(runs, args.json)
        if args.events:
            for res in results:
                write_events(res.events, events_path(args.events, res.policy, several))
        if args.trace_out:
            from dora.exec.recorded import write_recorded_trace

            for res in results:
                write_recorded_trace(res, events_path(args.trace_out, res.policy, several))
        if args.profile_out:
            from dora.profile import write_profile

            for res in results:
                write_profile(res.profile, events_path(args.profile_out, res.policy, several))
    return 0


if __name__ == "__main__":
    sys.exit(main())
