#!/usr/bin/env bash
# call 5 (one lease): the breakable GPU tests (segments now captured once per cell), the main job before (141266b, in
# .old/: attention alone, eager and graph) and now (the forward first) back to back for the cost, then the
# validation on trtllm-fmha-v2: --timing breakable alone with --forward-layers kinds, then all, one pass each, so
# that both runs put the same work on the GPU (the main job's eager and graph passes run cooler, call 2).
source .gpu/setup.sh
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
log=$OUT/call5.log
s() { local t0=$(date +%s); timeout "$@" 2>&1 | tail -40; echo "wall $(( $(date +%s)-t0 )) s"; }
{ echo "== tree ${CPBENCH_GIT_COMMIT} $(date -u)"; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv
  export PYTHONPATH=$PWD/src:$PYTHONPATH
  echo "== GPU tests (breakable)"
  s 60 python3 -m pytest -q -n 0 -m gpu tests/test_breakable_gpu.py -x -p no:cacheprovider
  echo "== main job before (141266b: attention alone, eager and graph)"
  PYTHONPATH=$PWD/.old/src:$PYTHONPATH s 150 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/main-before
  echo "== main job now (breakable kinds, graph, eager)"
  s 170 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-main-job
  for rule in kinds all; do
    echo "== trtllm-fmha-v2 breakable $rule (one pass)"
    s 200 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --timing breakable --forward-layers $rule --passes 1 \
        --no-profile --out runs/h200-forward-$rule-fmha-v2
  done
} > $log 2>&1
cp runs/main-before/manifest.json $OUT/main-before-manifest.json 2>/dev/null
for r in h200-main-job h200-forward-kinds-fmha-v2 h200-forward-all-fmha-v2; do
  (cd runs && tar czf $OUT/$r.tgz $r --exclude='*.json.gz' --exclude='*.svg' --exclude='*.jsonl') 2>/dev/null
done
ls -la $OUT
