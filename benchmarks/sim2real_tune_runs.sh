#!/bin/bash
# Real runs for the tuned-vs-default check of docs/sim2real.md:
#   benchmarks/sim2real_tune_runs.sh DIR TUNED.yaml
# dora with its default config and with TUNED.yaml (from python -m dora.sim tune), alternating, seeds 2
# and 3 (fresh: neither calibrated nor tuned on), each under benchmarks/exclusive.sh; the tiny model is
# DIR/tiny (benchmarks/sim2real_runs.sh builds it). Run dirs: DIR/tune_{default,tuned}{2,3}. Then:
#   python benchmarks/sim2real_tuned.py --cost COST --default DIR/tune_default2 DIR/tune_default3 \
#       --tuned DIR/tune_tuned2 DIR/tune_tuned3 --out OUT
set -euo pipefail
dir=${1:?usage: benchmarks/sim2real_tune_runs.sh DIR TUNED.yaml}
tuned=${2:?usage: benchmarks/sim2real_tune_runs.sh DIR TUNED.yaml}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
cd "$here"
for s in 2 3; do
  for c in default tuned; do
    extra=(); [ $c = tuned ] && extra=(--policy-config "$tuned")
    d="$dir/tune_$c$s"
    echo "$(date +%T) dora $c seed $s (load $(cut -d' ' -f1 /proc/loadavg))"
    benchmarks/exclusive.sh $py -m dora.exec --model "$dir/tiny" --policy dora --steps 12 --seed $s \
      --set trainer.threads=1 "${extra[@]}" --out "$d" --json "$d/dora.json" --events "$d/ev.dora.parquet" \
      --trace-out "$d/rec.dora.parquet" --quiet > "$d.log" 2>&1
  done
done
