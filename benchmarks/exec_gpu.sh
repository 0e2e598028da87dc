#!/bin/bash
# The GPU runs behind docs/executor_results.md (GPU, hf backend):
#   [STEPS=24] [SEEDS='0 1'] [PYTHON=python3] [SET='--set KEY=VALUE ...'] benchmarks/exec_gpu.sh DIR [POLICY ...]
# For a machine with one GPU and no vLLM or Ray (hence --backend hf --local): builds the tiny model
# (DIR/tiny: 4 layers x 256, warm-started 400 steps on the CPU, ~8 min on 2 cores; build it anywhere and copy
# it to DIR/tiny to save GPU time) if absent, then for each policy (default: sync dora) a calibration run
# (seed 0, DIR/calib) and a fresh run (seed 1, DIR/fresh): 2 engines, B = 16 x G = 8, eta = 2, 128 slots,
# answers up to 400 tokens, plus $SET (e.g. SET='--set trainer.bf16=false'). SEEDS=0 runs the calibration runs only
# (SEEDS=0, then SEEDS=1 in a second call: every policy's seed 0 first). Each run writes --json,
# --events, --trace-out and its profile; DIR/runs.tar.gz packs every run so far (not the model) after
# each one, and DIR/env.txt says what ran it.
# Then, anywhere (no GPU needed), the simulator calibrated on the seed-0 runs predicts the seed-1 runs:
#   tar -xzf DIR/runs.tar.gz -C D && python benchmarks/sim2real.py --calib D/calib --fresh D/fresh \
#     --policy sync --policy dora --out docs/results/sim2real_gpu
set -euo pipefail
dir=${1:?usage: benchmarks/exec_gpu.sh DIR [POLICY ...]}
shift
policies=${*:-sync dora}
steps=${STEPS:-24}
py=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$dir"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $py -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
} > "$dir/env.txt"
cat "$dir/env.txt"
[ -f "$dir/tiny/config.json" ] || $py -m dora.exec.tiny_model --out "$dir/tiny" --hidden-size 256 --layers 4 \
  --heads 4 --kv-heads 2 --intermediate-size 1024 --warm-start-steps 400 > "$dir/tiny.log" 2>&1
for p in $policies; do
  for s in ${SEEDS:-0 1}; do
    d=$([ $s = 0 ] && echo calib || echo fresh)
    mkdir -p "$dir/$d"
    echo "$(date -u +%T) $p $d"
    $py -m dora.exec --model "$dir/tiny" --local --backend hf --policy "$p" --instances 2 --steps "$steps" \
      --batch-size 16 --group-size 8 --eta 2 --seed $s --set rollout.max_num_seqs=128 --set task.max_new_tokens=400 \
      ${SET:-} --out "$dir/$d" --json "$dir/$d/$p.json" --events "$dir/$d/ev.$p.parquet" \
      --trace-out "$dir/$d/rec.$p.parquet" > "$dir/$d.$p.log" 2>&1 || { tail -5 "$dir/$d.$p.log"; exit 1; }
    tail -1 "$dir/$d.$p.log"
    (cd "$dir" && tar -czf runs.tar.gz --exclude='*.pt' --exclude='*.safetensors' --exclude='ckpt*' \
      env.txt tiny.log calib fresh ./*.log 2>/dev/null || true)
  done
done
echo "$(date -u +%T) done"
