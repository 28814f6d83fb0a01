#!/usr/bin/env bash
# call 3: the main job (the forward by default, one layer per kind; its wall time beside call 2's main job at
# 141266b), then the validation of --forward-layers kinds against all in the same lease: trtllm-fmha-v2 on the
# default cells (kinds = the main job's breakable rows), fa3 in its three modes on bs 1,4 x 2K,8K.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PYTHONPATH
log=$OUT/call3.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -45; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"
  echo "== main job"; s 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  echo "== trtllm-fmha-v2 breakable all"; s 165 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --timing breakable \
      --forward-layers all --out runs/h200-forward-all-fmha-v2
  echo "== fa3 breakable kinds"; s 85 python3 -m cpbench sweep --cp 4 --bs 1,4 --extend-len 2048,8192 --backend fa3 \
      --modes two-call,fused,cp-native --timing breakable --passes 1 --out runs/h200-fa3-breakable-kinds
  echo "== fa3 breakable all"; s 110 python3 -m cpbench sweep --cp 4 --bs 1,4 --extend-len 2048,8192 --backend fa3 \
      --modes two-call,fused,cp-native --timing breakable --forward-layers all --passes 1 --out runs/h200-fa3-breakable-all
} > $log 2>&1
for r in h200-main-job h200-forward-all-fmha-v2 h200-fa3-breakable-kinds h200-fa3-breakable-all; do
  (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz') 2>/dev/null; done
ls -la $OUT
