#!/usr/bin/env bash
# call 2 (one lease): after call 1 showed one-layer samples reading 1-2.7 % below whole forwards at higher SM clocks,
# the kinds samples run back to back (measure/stream.py). The main job before (141266b, in .old/) and now, back to
# back; trtllm-fmha-v2 with --forward-layers all on the same cells (the validation); the GPU tests.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call2.log
T0=$(date +%s)
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -60; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree $(date -u)"
  echo "== main job before (141266b: attention alone, eager and graph)"
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH s 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before
  export PYTHONPATH=$PWD/src:$PYTHONPATH
  echo "== main job now (breakable kinds, graph, eager)"
  s 190 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  echo "== trtllm-fmha-v2 breakable all (one pass)"
  s 215 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --timing breakable --forward-layers all --passes 1 --no-profile \
      --out runs/h200-forward-all-fmha-v2
  left=$(( 585 - ($(date +%s) - T0) ))
  echo "== GPU tests (breakable, stream), ${left} s left"
  [ $left -gt 25 ] && s $left python3 -m pytest -q -n 0 -m gpu tests/test_breakable_gpu.py -x -p no:cacheprovider
} > $log 2>&1
cp runs/main-before/manifest.json $OUT/main-before-manifest.json 2>/dev/null
for r in h200-main-job h200-forward-all-fmha-v2; do (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz') 2>/dev/null; done
ls -la $OUT
