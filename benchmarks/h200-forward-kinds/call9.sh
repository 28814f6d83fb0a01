#!/usr/bin/env bash
# calls 9 and 10 (one kernel each): the independent script with --kinds on all 8 default cells of the main job, so
# that the one-layer-per-kind estimate and the whole 36-layer forward are compared at the same clock in every cell
# (call 7 covered 3 cells per kernel). 8 samples, 2 warm-up and 2 layer-synchronised forwards per (rank, mode) to
# fit the device time; call 7 used 10, 3 and 3.
#   bash benchmarks/h200-forward-kinds/call9.sh trtllm-fmha-v2     (call 9)
#   bash benchmarks/h200-forward-kinds/call9.sh fa3                (call 10)
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
b=$1
log=$OUT/call9-$b.log
{ echo "== independent breakable script with --kinds, $b, 8 cells $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
  t0=$(date +%s)
  timeout 560 python3 benchmarks/breakable_check.py --backend $b --kinds --samples 8 --warmup 2 --sync-forwards 2 \
    --cells 4x1x2048,4x1x8192,4x1x16384,4x4x2048,4x4x8192,4x4x16384,4x16x2048,4x16x8192 \
    --out $OUT/call9-independent-kinds-$b.jsonl 2>&1 | tail -60
  echo "wall $(( $(date +%s)-t0 )) s"
  nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
} > $log 2>&1
ls -la $OUT
