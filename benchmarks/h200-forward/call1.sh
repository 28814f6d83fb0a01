#!/usr/bin/env bash
# call 1 (breakable forward, first GPU contact): the GPU tests of the breakable path, a small sweep with
# every timing on both Hopper kernels, and the independent script (benchmarks/breakable_check.py) on one cell.
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
log=$OUT/call1.log
{ echo "== tree $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  echo "== gpu tests (breakable)"; timeout 240 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider tests/test_breakable_gpu.py 2>&1 | tail -15
  echo "== smoke sweep"; t0=$(date +%s)
  timeout 200 python3 -m cpbench sweep --cp 4 --bs 1,16 --extend-len 2048 --timing eager,graph,breakable \
      --backend trtllm-fmha-v2,flashinfer-fa3 --out runs/smoke 2>&1 | tail -40; echo "sweep wall $(( $(date +%s)-t0 )) s"
  echo "== independent"; t0=$(date +%s)
  timeout 150 python3 benchmarks/breakable_check.py --backend trtllm-fmha-v2 --cells 4x1x2048,4x16x2048 --samples 10 --out $OUT/indep.jsonl 2>&1 | tail -12
  echo "indep wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
cp runs/smoke/report.md $OUT/smoke-report.md 2>/dev/null
(cd runs && tar czf $OUT/smoke-run.tgz smoke --exclude='*.json.gz' --exclude='profiles') 2>/dev/null
