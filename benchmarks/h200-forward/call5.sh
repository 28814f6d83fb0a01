#!/usr/bin/env bash
# call 5 (#33 evidence, final code): the README's main job twice back to back (2 timing passes per cell by
# default), each timed as a user would see it; compare's run-to-run line.
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
{ echo "== $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  for r in a b; do t0=$(date +%s)
    timeout 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-passes-$r 2>&1 | tail -14
    echo "main job $r wall $(( $(date +%s)-t0 )) s"; done
  echo "== compare"; python3 -m cpbench compare runs/h200-passes-a runs/h200-passes-b 2>&1 | grep -i "verdicts agree"
} > $OUT/call5.log 2>&1
(cd runs && tar czf $OUT/h200-passes.tgz --exclude='profiles' --exclude='*.svg' --exclude='results.csv' h200-passes-a h200-passes-b)
