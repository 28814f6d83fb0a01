#!/usr/bin/env bash
# call 3: bring back the evidence run of call 2 (traces left out) and hold it against the independent script
# (benchmarks/breakable_check.py, no cpbench import) on three of its cells, on both kernels.
source .gpu/setup.sh
export MPLBACKEND=Agg
(cd runs && tar czf $OUT/h200-forward.tgz --exclude='profiles' h200-forward)
{ echo "== tree $(date -u)"
  for b in trtllm-fmha-v2 fa3; do t0=$(date +%s)
    timeout 200 python3 benchmarks/breakable_check.py --backend $b --cells 4x1x2048,4x4x8192,4x16x2048 --samples 10 \
        --out $OUT/independent-$b.jsonl 2>&1 | grep '^#'; echo "$b wall $(( $(date +%s)-t0 )) s"
  done
} > $OUT/call3.log 2>&1
