#!/usr/bin/env bash
# One device call of the flex line's evidence (#35) at one extend length: the three points on FlexAttention
# beside FMHAv2, timed eager and under CUDA graphs, then the independent harness (no cpbench import) on rank 0.
#   bash benchmarks/h200-flex-line/call.sh 2048 h200-flex-line-2k            # the sweep, then the harness
#   bash benchmarks/h200-flex-line/call.sh 2048 h200-flex-line-2k harness    # one step per call: sweep | harness
# A step alone gets a longer limit (the harness's bs 16 at 2K needs more than the 120 s it has after the sweep).
set -u
LEN=$1 NAME=$2 STEPS=${3:-sweep harness}
HARNESS_S=$([ "$STEPS" = harness ] && echo 400 || echo 120)
source .gpu/setup.sh
: "${CPBENCH_GIT_COMMIT:?set CPBENCH_GIT_COMMIT to the commit this tree was sent from (git rev-parse HEAD here)}"
export CPBENCH_GIT_COMMIT
export PYTHONPATH=$PWD/src:$PYTHONPATH MPLBACKEND=Agg
{ echo "== $(date -u)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  t0=$(date +%s)
  [[ $STEPS == *sweep* ]] && timeout 400 python3 -m cpbench sweep --backend flex,trtllm-fmha-v2 --modes two-call,fused,cp-native \
    --cp 4 --bs 1,4,16 --extend-len "$LEN" --timing eager,graph --keep-going --out "runs/$NAME" 2>&1 | tail -40
  echo "sweep wall $(( $(date +%s)-t0 )) s"
  if [[ $STEPS == *harness* ]]; then
    echo "== harness"; mkdir -p "runs/$NAME"
    timeout $HARNESS_S python3 -u benchmarks/flex_line_check.py --bs 1 4 16 --extend-len "$LEN" --cp 4 --rank 0 \
      > "runs/$NAME/harness.jsonl" 2> "runs/$NAME/harness.err"; echo "harness rc $?"; tail -3 "runs/$NAME/harness.err"
  fi
} > "$OUT/$NAME.log" 2>&1
(cd runs && tar czf "$OUT/$NAME.tgz" --exclude='profiles' --exclude='*.svg' --exclude='results.csv' "$NAME")
