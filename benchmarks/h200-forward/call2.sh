#!/usr/bin/env bash
# call 2: the evidence run of the default cells with every timing on both Hopper kernels (docs/runs/h200-forward).
# Stopped by its timeout when it does not fit one call; call 3 finishes it with --resume.
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
{ echo "== tree $(git rev-parse --short HEAD) $(date -u)"; t0=$(date +%s)
  timeout -s INT 530 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --timing eager,graph,breakable \
      --backend trtllm-fmha-v2,flashinfer-fa3 --out runs/h200-forward 2>&1 | tail -12; echo "sweep wall $(( $(date +%s)-t0 )) s"
  wc -l runs/h200-forward/results.jsonl
} > $OUT/call2.log 2>&1
