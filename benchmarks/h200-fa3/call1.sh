#!/usr/bin/env bash
# call 1 (fa3 = FlashAttention-3, first GPU contact): its GPU tests, the default cells with the three kernels
# in the three modes under CUDA-graph timing, and the independent script (benchmarks/fa3_modes_check.py).
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call1.log
{ echo "== tree $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  python3 -c "import flash_attn_interface, importlib.metadata as m; print('flash_attn_3', m.version('flash_attn_3'))"
  echo "== gpu tests (fa3)"; timeout 200 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider -s tests/test_fa3_gpu.py tests/test_flash_attn3.py 2>&1 | tail -25
  echo "== sweep graph"; t0=$(date +%s)
  timeout 300 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --backend fa3,trtllm-fmha-v2,flashinfer-fa3 \
      --modes two-call,fused,cp-native --timing graph --out runs/h200-fa3-modes-graph 2>&1 | tail -60; echo "sweep wall $(( $(date +%s)-t0 )) s"
  echo "== independent"; t0=$(date +%s)
  timeout 120 python3 benchmarks/fa3_modes_check.py --cells 4x1x2048,4x4x8192,4x16x16384 --samples 30 --out $OUT/fa3-modes-check.jsonl 2>&1 | tail -12
  echo "indep wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
(cd runs && tar czf $OUT/fa3-graph-run.tgz h200-fa3-modes-graph --exclude='*.json.gz') 2>/dev/null
ls -la $OUT
