#!/usr/bin/env bash
# call 11 (one lease): the tree after the breakable forward became a study (studies/breakable, timed through
# measure/method.py's hook). The main job before (141266b, attention alone, in .old/) and now, back to back (the
# cost bound of #47 on the refactored code, and a fresh h200-main-job whose memory columns come after the fix of
# the peak read); the breakable GPU tests; `cpbench explain` on one cell (its child prepares through CellPrep since
# the last GPU run).
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call11.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -45; echo "rc ${PIPESTATUS[0]} wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree ${CPBENCH_GIT_COMMIT} $(date -u)"; nproc
  echo "== main job before (141266b: attention alone, eager and graph)"
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH s 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before
  export PYTHONPATH=$PWD/src:$PYTHONPATH
  echo "== main job now (breakable kinds, graph, eager)"
  s 170 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  echo "== GPU tests: breakable"
  s 120 python3 -m pytest -q -n 0 -m gpu tests/test_breakable_gpu.py -p no:cacheprovider
  echo "== explain one cell (trtllm-fmha-v2, cp 4, bs 4 x 2K, rank 0)"
  s 120 python3 -m cpbench explain --cp 4 --bs 4 --extend-len 2048 --out runs/h200-explain-study
} > $log 2>&1
cp runs/main-before/manifest.json $OUT/main-before-manifest.json 2>/dev/null
(cd runs && tar czf $OUT/h200-main-job.tgz h200-main-job --exclude='*.json.gz' --exclude='*.svg' --exclude='*.jsonl') 2>/dev/null
(cd runs && tar czf $OUT/h200-explain-study.tgz h200-explain-study) 2>/dev/null
ls -la $OUT
