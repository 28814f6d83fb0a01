#!/usr/bin/env bash
# call 3 (one lease): kinds samples' budget split over the kinds and the precision stop read on the forward
# estimate. The main job before (141266b, in .old/) and now, back to back; then fa3 on the default cells with
# --forward-layers all (bs 1 and 4 x 2K and 8K: the device time left) and, right after it (the GPU as hot as the whole forwards left it), with kinds.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call3.log
T0=$(date +%s)
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -45; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree $(date -u)"
  echo "== main job before (141266b: attention alone, eager and graph)"
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH s 130 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before
  export PYTHONPATH=$PWD/src:$PYTHONPATH
  echo "== main job now (breakable kinds, graph, eager)"
  s 165 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  echo "== fa3 breakable all (one pass)"
  s 110 python3 -m cpbench sweep --cp 4 --bs 1,4 --extend-len 2048,8192 --backend fa3 --timing breakable --forward-layers all --passes 1 \
      --no-profile --out runs/h200-fa3-breakable-all
  left=$(( 340 - ($(date +%s) - T0) ))
  echo "== fa3 breakable kinds (one pass), ${left} s left"
  [ $left -gt 20 ] && s $left python3 -m cpbench sweep --cp 4 --bs 1,4 --extend-len 2048,8192 --backend fa3 --timing breakable --passes 1 \
      --no-profile --out runs/h200-fa3-breakable-kinds
} > $log 2>&1
cp runs/main-before/manifest.json $OUT/main-before-manifest.json 2>/dev/null
for r in h200-main-job h200-fa3-breakable-all h200-fa3-breakable-kinds; do
  (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz') 2>/dev/null; done
ls -la $OUT
