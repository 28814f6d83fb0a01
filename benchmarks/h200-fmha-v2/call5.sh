#!/usr/bin/env bash
# call 5 (window layers read the SWA pool; derived columns on read; options as one object): every GPU test,
# the SWA-pool sweep again (its kernels now read the SWA table), and a default sweep compared with a committed one
source .gpu/setup.sh
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
mkdir -p runs
log=$OUT/call5.log
{ echo "== commit $(git rev-parse --short HEAD 2>/dev/null) $(date -u)"
  echo "== gpu tests"; t0=$(date +%s); timeout 300 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider --durations=5 2>&1 | tail -40; echo "pytest wall $(( $(date +%s)-t0 )) s"
  echo "== swa-pool sweep"; t0=$(date +%s); timeout 130 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --swa-pool --out runs/h200-fmha-v2-swa-pool 2>&1 | tail -30; echo "sweep wall $(( $(date +%s)-t0 )) s"
  echo "== default sweep"; t0=$(date +%s); timeout 110 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-fmha-v2-default-c 2>&1 | tail -30; echo "sweep wall $(( $(date +%s)-t0 )) s"
  echo "== compare with the committed default run"; python3 -m cpbench compare docs/runs/h200-fmha-v2-default-a runs/h200-fmha-v2-default-c 2>&1 | head -40
} > $log 2>&1
tar czf $OUT/runs5.tgz runs
