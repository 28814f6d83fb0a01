#!/usr/bin/env bash
# call 12 (one lease): --forward-layers all on the main job's cells, both kernels, one pass: each breakable row now
# also holds the one-layer-per-kind estimate timed right after its whole forwards (kinds_forward_us), so cpbench's
# own `kinds` and `all` meet at one clock. Table: benchmarks/h200-forward-kinds/same_run.py RUN.
#   CPBENCH_GIT_COMMIT=<commit> bash benchmarks/h200-study/call12.sh
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PYTHONPATH
log=$OUT/call12.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -30; echo "rc ${PIPESTATUS[0]} wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree ${CPBENCH_GIT_COMMIT} $(date -u)"
  for b in trtllm-fmha-v2 fa3; do
    echo "== $b: breakable, --forward-layers all (whole forwards, then the one-layer estimate), one pass"
    s 270 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --backend $b --timing breakable --forward-layers all \
        --passes 1 --no-profile --out runs/h200-forward-same-clock-$b
    python3 benchmarks/h200-forward-kinds/same_run.py runs/h200-forward-same-clock-$b
  done
} > $log 2>&1
for b in trtllm-fmha-v2 fa3; do
  (cd runs && tar czf $OUT/h200-forward-same-clock-$b.tgz h200-forward-same-clock-$b --exclude='*.svg' --exclude='*.jsonl' --exclude='*.csv') 2>/dev/null
done
ls -la $OUT
