"""python -m dora.sim: simulate scheduling policies on a length trace and compare them.

Examples:
  python -m dora.sim --trace traces/moe_longtail.parquet
  python -m dora.sim --trace traces/dense_math.parquet --policy dora --policy sync --eta 2 --json out.json
  python -m dora.sim --trace T.parquet --hardware H20 --model qwen2.5-32b --set policy.dora.migrate_kv=false
  python -m dora.sim sweep --grid cluster.instances=64,256 --policy dora --policy sync --out sweep.parquet
      (one tidy table over a grid of config values / trace shapes: see dora/sim/tools/sweep.py or `sweep --help`)
  python -m dora.sim calibrate out/exec/dora/profile.json --out cost.yaml   (fit the cost model to a real run)
  python -m dora.sim compare real_events.parquet sim_events.parquet         (real vs simulated metrics)
  python -m dora.sim tune --trace rec.parquet --cost cost.yaml --out tuned.yaml  (search dora's knobs)
  python -m dora.sim --trace T.parquet --hardware H100 --model qwen2.5-7b --gpus 256
      (each policy at its best rollout/trainer split of 256 devices; `plan` prints the search too)

Precedence of settings: built-in defaults < --hardware/--model preset < --config YAML <
--cost YAML < the flags < --set KEY=VALUE (dotted keys of SimConfig, e.g. cluster.max_seqs=128).
"""

from __future__ import annotations

import sys

from dora.errors import cli_errors
from dora.sim.cli import parser
from dora.sim.runs import run_command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:
        from dora.sim.tools.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] in (["calibrate"], ["compare"], ["tune"], ["plan"]):
        import importlib

        return importlib.import_module(f"dora.sim.tools.{argv[0]}").main(argv[1:])
    args = parser(__doc__).parse_args(argv)
    with cli_errors("dora.sim"):
        run_command(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
