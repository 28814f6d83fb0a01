#!/usr/bin/env bash
# H200 evidence for workloads as deployments see them: gpt-oss-120b, flashinfer-fa3, a lognormal length mix
# (median 4096 prompt tokens, sigma 1.0, seed 1, 2 batches per bs) with half of every prompt cached.
# Run from the repository root (flashinfer installed, JIT cache warm; each sweep is about 1-2 minutes):
#   bash benchmarks/h200_workloads.sh one   # 1 GPU: TP 4 and TP 8, cp 4 simulated
#   bash benchmarks/h200_workloads.sh two   # 2 GPUs: TP 8, cp 2 over torchrun, and its simulated twin
# Run directories go to runs/; logs to $OUT (default /tmp/cpbench-out).
set -uo pipefail
OUT=${OUT:-/tmp/cpbench-out}
mkdir -p "$OUT" runs
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
mix="--backend flashinfer-fa3 --model gpt-oss-120b --bs 1,4,16 --lengths dist:lognormal:4096:1.0 --batches 2 --prefix-hit 0.5 --seed 1"
case "${1:-}" in
one)
  for tp in 4 8; do
    timeout 170 python3 -m cpbench sweep $mix --tp $tp --cp 4 --out runs/h200-fa3-tp$tp-mix 2>&1 | tee "$OUT/tp$tp.log"
  done
  python3 -m cpbench geometry --check examples/sglang_cp_metadata_cp4.json 2>&1 | tee "$OUT/geometry-check.log"
  ;;
two)
  timeout 170 python3 -m cpbench sweep $mix --tp 8 --cp 2 --launch torchrun --nproc-per-node 2 \
    --out runs/h200x2-fa3-tp8-mix-torchrun 2>&1 | tee "$OUT/tp8-torchrun.log"
  timeout 170 python3 -m cpbench sweep $mix --tp 8 --cp 2 --out runs/h200x2-fa3-tp8-mix-simulated 2>&1 \
    | tee "$OUT/tp8-simulated.log"
  python3 -m cpbench report runs/h200x2-fa3-tp8-mix-torchrun --simulated runs/h200x2-fa3-tp8-mix-simulated
  ;;
*) echo "usage: $0 one|two" >&2; exit 2 ;;
esac
