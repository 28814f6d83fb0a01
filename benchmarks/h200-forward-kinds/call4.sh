#!/usr/bin/env bash
# call 4: the device time left (under 5 min) allowed one command: the main job with the final kinds code (each kind
# its share of the budget, the precision stop on the forward estimate). Its "before" is calls 1 and 2 (99 s, 102 s).
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PYTHONPATH
log=$OUT/call4.log
{ echo "== main job now (breakable kinds, graph, eager) $(date -u)"; t0=$(date +%s)
  timeout 170 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job 2>&1 | tail -60
  echo "wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
(cd runs && tar czf $OUT/h200-main-job.tgz h200-main-job --exclude='*.json.gz' --exclude='*.svg' --exclude='*.csv' --exclude='*.jsonl') 2>/dev/null
ls -la $OUT
