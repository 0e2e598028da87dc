#!/bin/bash
# The real runs behind docs/sim2real.md and docs/results/sim2real/:
#   [STEPS=12] benchmarks/sim2real_runs.sh DIR [POLICY ...]
# builds the tiny model (DIR/tiny, warm-started 300 steps) if absent, then for each policy a calibration
# run (seed 0, DIR/calib) and a fresh run (seed 1, DIR/fresh) back to back, each under
# benchmarks/exclusive.sh (on a shared host, other jobs then barely take CPU from the timed run).
# Then:  python benchmarks/sim2real.py --calib DIR/calib --fresh DIR/fresh --out docs/results/sim2real
set -euo pipefail
dir=${1:?usage: benchmarks/sim2real_runs.sh DIR [POLICY ...]}
shift
policies=${*:-sync one_step partial laminar dora}
steps=${STEPS:-12}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
cd "$here"
[ -f "$dir/tiny/config.json" ] || $py -m dora.exec.tiny_model --out "$dir/tiny" --warm-start-steps 300 --warm-start-reverse-frac 0 --threads 1
for p in $policies; do
  for s in 0 1; do
    d=$([ $s = 0 ] && echo calib || echo fresh)
    echo "$(date +%T) $p $d (load $(cut -d' ' -f1 /proc/loadavg))"
    benchmarks/exclusive.sh $py -m dora.exec --model "$dir/tiny" --policy $p --steps $steps --seed $s \
      --set trainer.threads=1 --out "$dir/$d" --json "$dir/$d/$p.json" --events "$dir/$d/ev.$p.parquet" \
      --trace-out "$dir/$d/rec.$p.parquet" --quiet > "$dir/$d.$p.log" 2>&1
  done
done
