#!/usr/bin/env bash
# call 8: the final tree on one H200. check-backend's CUDA parts (kernel patterns found by torch.profiler, graph
# timing) on cpbench's own GPU backends, which had only run on a CPU; the breakable GPU tests (segments shared by a
# cell's ranks and modes) and the FlashAttention-3 GPU tests.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PYTHONPATH
log=$OUT/call8.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -45; echo "rc ${PIPESTATUS[0]} wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree ${CPBENCH_GIT_COMMIT} $(date -u)"
  for b in trtllm-fmha-v2 fa3 flashinfer-fa3 flashinfer-fa2 torch; do
    echo "== check-backend $b"
    s 60 python3 -m cpbench check-backend $b
  done
  echo "== GPU tests: breakable, fa3"
  s 150 python3 -m pytest -q -n 0 -m gpu tests/test_breakable_gpu.py tests/test_fa3_gpu.py tests/test_trtllm_fmha_v2_gpu.py -k "kernel_counts or breakable or chunk or fa3" -p no:cacheprovider
} > $log 2>&1
ls -la $OUT
