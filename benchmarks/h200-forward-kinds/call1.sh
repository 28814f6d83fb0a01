#!/usr/bin/env bash
# call 1 (one lease): the main job before (141266b, attention alone, in .old/) and now (the forward first, one
# layer per kind behind a GPU spin), back to back; then trtllm-fmha-v2 with --forward-layers all on the same
# cells (the validation of kinds = the main job's breakable rows); then the GPU tests of the breakable forward.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call1.log
T0=$(date +%s)
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -60; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"
  echo "== main job before (141266b: attention alone, eager and graph)"
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH s 170 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before
  export PYTHONPATH=$PWD/src:$PYTHONPATH
  echo "== main job now (breakable kinds, graph, eager)"
  s 210 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  echo "== trtllm-fmha-v2 breakable all (one pass)"
  s 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --timing breakable --forward-layers all --passes 1 --no-profile \
      --out runs/h200-forward-all-fmha-v2
  left=$(( 585 - ($(date +%s) - T0) ))
  echo "== GPU tests (breakable, timing), ${left} s left"
  [ $left -gt 30 ] && s $left python3 -m pytest -q -n 0 -m gpu tests/test_breakable_gpu.py -x -p no:cacheprovider
} > $log 2>&1
grep -h '"sweep_wall_s"\|"sweep_phase_s"' -A3 runs/main-before/manifest.json runs/h200-main-job/manifest.json > $OUT/walls.txt 2>/dev/null
for r in h200-main-job h200-forward-all-fmha-v2; do (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz') 2>/dev/null; done
ls -la $OUT
