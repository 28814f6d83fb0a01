#!/usr/bin/env bash
# call 7 (a cell's rows written in one append; segments chart without the host-bound scale; CPU report's
# check line): every GPU test, and the README's main job timed once on the H200. Tree: 8430f3f (+ README text).
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
log=$OUT/call7.log
{ echo "== tree 8430f3f Tue Dec  1 22:38:53 UTC 2026"
  echo "== gpu tests"; t0=$(date +%s); timeout 300 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider --durations=5 2>&1 | tail -30; echo "pytest wall $(( $(date +%s)-t0 )) s"
  echo "== main job"; t0=$(date +%s); timeout 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-job 2>&1 | tail -25; echo "sweep wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
cp runs/main-job/report.md $OUT/main-job-report.md 2>/dev/null
cp runs/main-job/plots/segments.png $OUT/main-job-segments.png 2>/dev/null
cp runs/main-job/plots/latency.png $OUT/main-job-latency.png 2>/dev/null
