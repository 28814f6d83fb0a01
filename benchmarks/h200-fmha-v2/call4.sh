#!/usr/bin/env bash
# call 4 (after the layer refactor): every GPU test, and the default sweep with a separate SWA pool
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
mkdir -p runs
log=$OUT/call4.log
{ echo "== commit $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"
  echo "== gpu tests"; t0=$(date +%s); timeout 330 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider --durations=5 2>&1 | tail -40; echo "pytest wall $(( $(date +%s)-t0 )) s"
  echo "== swa-pool sweep"; t0=$(date +%s); timeout 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --swa-pool --out runs/h200-fmha-v2-swa-pool 2>&1 | tail -30; echo "sweep wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
tar czf $OUT/runs4.tgz runs
