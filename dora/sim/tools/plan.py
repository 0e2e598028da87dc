"""`python -m dora.sim plan --gpus N`: for this trace, model, hardware and N devices in all, each
policy's best split between rollout and training (`dora.sim.split`: the way each framework
would use N devices, searched), the search itself (samples/s of every policy at every split),
then the table of each policy at its best split and the verdict. `--json` writes all of it.
Runs are independent: `--jobs` local processes, or a Ray cluster (`--ray-address`).
"""

from __future__ import annotations

import sys

from dora.errors import InputError, cli_errors
from dora.parallel import check_jobs
from dora.sim.split import search


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


def main(argv: list[str] | None = None) -> int:
    from dora.sim import memory
    from dora.sim.cli import parser, resolve_config
    from dora.sim.run import check_fits
    from dora.sim.runs import check_request, run_table
    from dora.trace import load_trace

    ap = parser("python -m dora.sim plan: each policy's best rollout/trainer split of N devices, and the winner")
    ap.prog = "python -m dora.sim plan"
    args = ap.parse_args(argv)
    with cli_errors("dora.sim plan"):
        if args.gpus is None:
            raise InputError("plan: --gpus N is required (the devices to split between rollout and training)")
        cfg = resolve_config(args)
        check_request(args)
        trace = load_trace(cfg.trace)
        cfg, sizing = memory.resolve(cfg, trace)
        check_fits(cfg, trace)
        jobs = check_jobs(args.jobs)
        best, rows = search(cfg, trace, args.gpus, args.splits, jobs, args.ray_address, args.quiet)
        print(search_table(rows, args.gpus, cfg.cluster.devices_per_instance))
        run_table(args, cfg, trace, best, rows, jobs, sizing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
