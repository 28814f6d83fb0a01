#!/usr/bin/env bash
# call 2: the main job before (141266b, in .old/) and after (the forward by default, one layer per kind), back to
# back in one lease, then fa3 and flashinfer-fa3 on the default cells in the three modes under breakable timing.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call2.log
{ echo "== tree $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"
  echo "== main job at 141266b (attention alone: eager, graph)"; t0=$(date +%s)
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH timeout 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before 2>&1 | tail -30
  echo "main job before: wall $(( $(date +%s)-t0 )) s"
  echo "== main job now (breakable kinds, graph, eager)"; t0=$(date +%s)
  PYTHONPATH=$PWD/src:$PYTHONPATH timeout 240 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job 2>&1 | tail -70
  echo "main job now: wall $(( $(date +%s)-t0 )) s"
  echo "== fa3 breakable (kinds)"; t0=$(date +%s)
  PYTHONPATH=$PWD/src:$PYTHONPATH timeout 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --backend fa3,flashinfer-fa3 \
      --modes two-call,fused,cp-native --timing breakable --out runs/h200-fa3-modes-breakable 2>&1 | tail -40
  echo "fa3 breakable: wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
for r in h200-main-job h200-fa3-modes-breakable; do (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz') 2>/dev/null; done
grep -h "sweep_wall_s" runs/main-before/manifest.json runs/h200-main-job/manifest.json > $OUT/walls.txt 2>/dev/null
ls -la $OUT
