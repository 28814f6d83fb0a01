#!/usr/bin/env bash
# call 6 (one lease): the validation on fa3 (FlashAttention-3) as call 5 ran it on trtllm-fmha-v2, then the
# independent script (benchmarks/breakable_check.py, no cpbench import) on three default cells of both kernels.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PYTHONPATH
log=$OUT/call6.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -40; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree ${CPBENCH_GIT_COMMIT} $(date -u)"
  for rule in kinds all; do
    echo "== fa3 breakable $rule (one pass)"
    s 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --backend fa3 --timing breakable --forward-layers $rule \
        --passes 1 --no-profile --out runs/h200-forward-$rule-fa3
  done
  for b in trtllm-fmha-v2 fa3; do
    echo "== independent breakable script, $b"
    s 110 python3 benchmarks/breakable_check.py --backend $b --out $OUT/independent-$b.jsonl
  done
} > $log 2>&1
for r in h200-forward-kinds-fa3 h200-forward-all-fa3; do
  (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz' --exclude='*.svg' --exclude='*.jsonl') 2>/dev/null
done
ls -la $OUT
