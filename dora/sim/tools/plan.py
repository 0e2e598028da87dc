"""`python -m dora.sim plan --gpus N`: for this trace, model, hardware and N devices in all, each
policy's best split between rollout and training (`dora.sim.split`: the way each framework
would use N devices, searched), the search itself (samples/s of every policy at every split),
then the table of each policy at its best split and the verdict. `--json` writes all of it.
Runs are independent: `--jobs` local processes, or a Ray cluster (`--ray-address`).
"""

from __future__ import annotations

import sys

from dora.errors import InputError, cli_errors


def main(argv: list[str] | None = None) -> int:
    from dora.sim.cli import parser
    from dora.sim.runs import run_command

    ap = parser("python -m dora.sim plan: each policy's best rollout/trainer split of N devices, and the winner")
    ap.prog = "python -m dora.sim plan"
    args = ap.parse_args(argv)
    with cli_errors("dora.sim plan"):
        if args.gpus is None:
            raise InputError("plan: --gpus N is required (the devices to split between rollout and training); give it, "
                             "e.g. --gpus 16")
        run_command(args, show_search=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
