#!/usr/bin/env bash
# call 1: doctor, GPU tests of the new backend, the default sweep twice back to back, compare
source .gpu/setup.sh
export PYTHONPATH=src:$PYTHONPATH MPLBACKEND=Agg
mkdir -p runs
log=$OUT/call1.log
{ echo "== commit $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv;
  echo "== doctor"; python3 -m cpbench doctor 2>&1 | tail -30;
  echo "== gpu tests"; t0=$(date +%s); timeout 240 python3 -m pytest -q -n 0 -m gpu -s --durations=5 tests/test_trtllm_fmha_v2_gpu.py 2>&1 | tail -70; echo "pytest wall $(( $(date +%s)-t0 )) s";
  for r in a b; do echo "== sweep $r"; t0=$(date +%s); timeout 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-fmha-v2-default-$r 2>&1 | tail -45; echo "sweep $r wall $(( $(date +%s)-t0 )) s"; done
  echo "== compare"; python3 -m cpbench compare runs/h200-fmha-v2-default-a runs/h200-fmha-v2-default-b 2>&1 | tail -60; echo "compare rc $?"
} > $log 2>&1
tar czf $OUT/runs1.tgz runs
ls -la $OUT
