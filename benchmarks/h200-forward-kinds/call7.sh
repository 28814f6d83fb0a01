#!/usr/bin/env bash
# call 7 (one lease): the cost, after calls 5-6 found where the main job's added time went (segments captured per
# rank and mode, an extra eager forward per rank and mode for the breakable check, charts drawn one at a time): the
# main job before (141266b, in .old/) and now, back to back; then the independent script with --kinds (one-layer
# chunks right after each whole forward: the estimator and the whole forward at the same clock) on both kernels.
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call7.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -40; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree ${CPBENCH_GIT_COMMIT} $(date -u)"; nproc
  echo "== main job before (141266b: attention alone, eager and graph)"
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH s 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before
  export PYTHONPATH=$PWD/src:$PYTHONPATH
  echo "== main job now (breakable kinds, graph, eager)"
  s 170 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  for b in trtllm-fmha-v2 fa3; do
    echo "== independent breakable script with --kinds, $b"
    s 140 python3 benchmarks/breakable_check.py --backend $b --kinds --out $OUT/independent-kinds-$b.jsonl
  done
} > $log 2>&1
cp runs/main-before/manifest.json $OUT/main-before-manifest.json 2>/dev/null
(cd runs && tar czf $OUT/h200-main-job.tgz h200-main-job --exclude='*.json.gz' --exclude='*.svg' --exclude='*.jsonl') 2>/dev/null
ls -la $OUT
