#!/usr/bin/env bash
# call 4 (--passes, #33): two back-to-back runs of the default main job (now 2 timing passes per cell), each
# timed; the breakable GPU tests once more.
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
{ echo "== $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  for r in a b; do t0=$(date +%s)
    timeout 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-passes-$r 2>&1 | tail -22
    echo "main job $r wall $(( $(date +%s)-t0 )) s"; done
  echo "== compare"; python3 -m cpbench compare runs/h200-passes-a runs/h200-passes-b 2>&1 | grep -i "verdicts agree\|inside"
  echo "== gpu tests (breakable)"; timeout 120 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider tests/test_breakable_gpu.py 2>&1 | tail -3
} > $OUT/call4.log 2>&1
(cd runs && tar czf $OUT/h200-passes.tgz --exclude='profiles' --exclude='*.svg' --exclude='results.csv' h200-passes-a h200-passes-b)
