#!/usr/bin/env bash
# The 2 x H200 evidence for the torchrun mode, in two parts (each fits one 10-minute device call).
# Run from the repository root on a machine with 2 GPUs, after `source .gpu/setup.sh`:
#   bash benchmarks/h200_x2.sh dist   # smoke, torchrun sweep cp 2 bs 1,4,16 (flashinfer-fa3, eager+graph), profile
#   bash benchmarks/h200_x2.sh sim    # the simulated sweep of the same cells, harness overhead, GPU tests
# Run directories go to runs/h200x2-*; logs and a tarball to $OUT (default /tmp/cpbench-out).
set -uo pipefail
OUT=${OUT:-/tmp/cpbench-out}
mkdir -p "$OUT" runs
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
cp="--cp 2 --bs 1,4,16"
case "${1:-}" in
dist)
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  env | grep '^NCCL_' > "$OUT/nccl_env.txt"
  timeout 150 python3 -m cpbench sweep --launch torchrun --nproc-per-node 2 --cp 2 --bs 1 --extend-len 2048 \
    --out runs/h200x2-smoke --no-report --budget-ms 20 2>&1 | tee "$OUT/smoke.log"
  timeout 330 python3 -m cpbench sweep --launch torchrun --nproc-per-node 2 $cp --out runs/h200x2-fa3-torchrun \
    2>&1 | tee "$OUT/torchrun.log"
  timeout 90 python3 -m cpbench profile --launch torchrun --nproc-per-node 2 --cp 2 --bs 1 --extend-len 8192 \
    --out runs/h200x2-fa3-profile 2>&1 | tee "$OUT/profile.log"
  ;;
sim)
  timeout 240 python3 -m cpbench sweep $cp --out runs/h200x2-fa3-simulated 2>&1 | tee "$OUT/simulated.log"
  timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/dist_harness_overhead.py \
    --backend flashinfer-fa3 --seq 8192 32768 2>&1 | tee "$OUT/harness.log"
  timeout 150 python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_dist_gpu.py 2>&1 | tee "$OUT/gpu-tests.log"
  ;;
*) echo "usage: $0 dist|sim" >&2; exit 2 ;;
esac
find runs -name '*.json.gz' -size +2M -delete  # keep committed traces small
tar czf "$OUT/runs-$1.tgz" runs
