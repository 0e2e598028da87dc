"""The `python -m dora.sim` command line: its flags and how they resolve to a SimConfig.

Precedence of settings: built-in defaults < --hardware/--model preset < --config YAML <
--cost YAML < the flags < --set KEY=VALUE (dotted keys of SimConfig, e.g. cluster.max_seqs=128).
"""

from __future__ import annotations

import argparse

from dora.config import apply_cli, build, deep_merge, load_yaml, to_dict
from dora.errors import ArgumentParser, InputError
from dora.sched.registry import names as policy_names
from dora.sim.config import SimConfig
from dora.sim.presets import HARDWARE, MODELS, derive


def parser(description: str | None = None) -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m dora.sim", description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", help="trace parquet (default: traces/moe_longtail.parquet); make one from your own "
                                    "length logs with `python -m dora.trace import` (format: docs/traces.md)")
    ap.add_argument("--policy", action="append", choices=policy_names(),
                    help="policy to run (repeat for several; default: all five)")
    ap.add_argument("--config", help="YAML file with SimConfig keys (trace, steps, cluster, cost, policy, ...)")
    ap.add_argument("--cost", help="YAML file of cost-model coefficients (e.g. from calibration)")
    ap.add_argument("--hardware", help=f"hardware preset: {', '.join(HARDWARE)}")
    ap.add_argument("--model", help=f"model preset: {', '.join(MODELS)}")
    ap.add_argument("--instances", type=int, help="rollout instances")
    ap.add_argument("--devices-per-instance", type=int, help="devices per rollout instance (TP/EP degree)")
    ap.add_argument("--max-seqs", type=_slots, metavar="N|auto",
                    help="decode slots per instance (default auto: from device memory and the trace's mean "
                         "context, the way vLLM sizes its engine; docs/planning.md)")
    ap.add_argument("--trainer-devices", type=int, help="trainer devices")
    ap.add_argument("--gpus", type=int, metavar="N",
                    help="devices in all: each policy gets its best split between rollout and training (searched; "
                         "colocated sync uses all N for both); replaces --instances and --trainer-devices")
    ap.add_argument("--splits", type=int, default=8, metavar="K",
                    help="with --gpus: first try trainer shares 1/K .. (K-1)/K of the devices (default 8)")
    ap.add_argument("--steps", type=int, help="trainer steps to simulate")
    ap.add_argument("--batch-size", type=int, help="prompt groups per trainer step (B)")
    ap.add_argument("--eta", type=int, help="staleness bound η")
    ap.add_argument("--seed", type=int, help="seed of the MoE imbalance draws")
    ap.add_argument("--reference", action="store_true", help="one event per decode step (slow, for checking)")
    ap.add_argument("--mtbf-s", type=float,
                    help="instance failures: mean time between failures per rollout instance, simulated s")
    ap.add_argument("--repair-s", type=float, help="failed instance back after this many simulated s (default 600)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any config key")
    ap.add_argument("--json", metavar="OUT", help="write {runs: [{policy, config, metrics}]} here")
    ap.add_argument("--events", metavar="OUT.parquet",
                    help="write the event log here (with several policies: OUT.<policy>.parquet)")
    ap.add_argument("--plot", metavar="OUT.png",
                    help="timeline PNG (with several policies: OUT.<policy>.png timelines + OUT.png bubble bars)")
    ap.add_argument("--perfetto", metavar="OUT.json",
                    help="Chrome/Perfetto trace-event JSON of the event log (several policies: OUT.<policy>.json)")
    ap.add_argument("--sensitivity", type=float, default=0.2, metavar="S",
                    help="after the table, rerun the policies that keep C1-C3 with cost coefficient groups scaled "
                         "by 1-S and 1+S and say whether the winner holds (default 0.2; 0: skip)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel processes for the sensitivity reruns "
                                                          "(default: CPU count)")
    ap.add_argument("--ray-address", metavar="ADDR",
                    help="run the sensitivity reruns on this Ray cluster ('auto', 'local', ray://host:port)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap


def _slots(text: str) -> int:
    """--max-seqs: a count, or auto (0: derived from memory, dora.sim.memory)."""
    if text == "auto":
        return 0
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number of slots nor auto; pass 1 or more, "
                                         "or auto") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be >= 1 decode slot, or auto; pass 1 or more, or auto")
    return n


def resolve_config(args: argparse.Namespace) -> SimConfig:
    if getattr(args, "gpus", None) is not None:  # (sweep reuses this without --gpus)
        if args.instances is not None or args.trainer_devices is not None:
            raise InputError("--gpus: replaces --instances and --trainer-devices (the split is searched per policy); "
                             "give either --gpus or those two")
        if args.splits < 2 or args.splits > 64:
            raise InputError(f"--splits {args.splits}: must be in 2..64 trainer shares")
    data: dict = {}
    if args.hardware or args.model:
        if not (args.hardware and args.model):
            raise InputError("--hardware and --model go together: name both (e.g. --hardware H800 --model qwen2.5-7b)")
        cost, hints = derive(args.hardware, args.model, args.devices_per_instance or 0)
        data["cost"] = to_dict(cost)
        data["cluster"] = {"devices_per_instance": hints["devices_per_instance"],
                           "hardware": args.hardware, "model": args.model}
    if args.config:
        data = deep_merge(data, load_yaml(args.config))
    if args.cost:
        data = deep_merge(data, {"cost": load_yaml(args.cost, "cost file")})
    flags = {
        ("trace",): args.trace, ("steps",): args.steps, ("seed",): args.seed,
        ("cluster", "instances"): args.instances, ("cluster", "devices_per_instance"): args.devices_per_instance,
        ("cluster", "max_seqs"): args.max_seqs, ("cluster", "trainer_devices"): args.trainer_devices,
        ("policy", "eta"): args.eta, ("policy", "batch_size"): args.batch_size,
        ("faults", "mtbf_s"): args.mtbf_s, ("faults", "repair_s"): args.repair_s,
    }
    if args.policy:
        data["policies"] = args.policy
    if args.reference:
        data["reference"] = True
    return build(SimConfig, apply_cli(data, flags, args.set))
