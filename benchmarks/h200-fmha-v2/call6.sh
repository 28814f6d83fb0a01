#!/usr/bin/env bash
# call 6 (ranks start without pandas; profile under torchrun records failed cells; resume checks before a launch):
# every GPU test, and the README's main job timed once on the H200
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
log=$OUT/call6.log
{ echo "== commit $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"
  echo "== gpu tests"; t0=$(date +%s); timeout 300 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider --durations=5 2>&1 | tail -30; echo "pytest wall $(( $(date +%s)-t0 )) s"
  echo "== main job"; t0=$(date +%s); timeout 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-job 2>&1 | tail -25; echo "sweep wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
