#!/usr/bin/env bash
# One device call for #36: traces of the stand-in engine (tests/engine_like_prefill.py, no cpbench import) on
# the H200, read back with `cpbench profile --from`, beside cpbench's own cell; then the GPU tests of --from if
# time is left. Every step is bounded and the results are packed after each, so a call cut short keeps what ran.
# Needs .gpu (the kit) and .whl (ijson's wheel) carried.
set -u
source .gpu/setup.sh
: "${CPBENCH_GIT_COMMIT:?set CPBENCH_GIT_COMMIT to the commit this tree was sent from (git rev-parse HEAD here)}"
export CPBENCH_GIT_COMMIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:${PYTHONPATH:-} MPLBACKEND=Agg
E=tests/engine_like_prefill.py T=engine-traces LOG=$OUT/engine-traces.log
mkdir -p $T/nsys runs
pack() { tar czf $OUT/engine-traces.tgz $T $(ls -d runs/engine-cell-fa3/manifest.json runs/engine-cell-fa3/results.jsonl 2>/dev/null); }
step() { echo "== $* ($(date -u +%T))" >> $LOG; }
step start; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader >> $LOG
for mode in fused two-call; do step "traces $mode"
  timeout 80 python3 $E --mode $mode --cp 4 --bs 1 --extend-len 8192 --forwards 3 --out $T/cp4-bs1-ext8192-$mode 2>&1 | grep -v USDT | tail -3 >> $LOG
done; pack
step "cpbench's cell"
timeout 80 python3 -m cpbench sweep --backend flashinfer-fa3 --cp 4 --bs 1 --extend-len 8192 --timing eager --passes 1 \
  --out runs/engine-cell-fa3 2>&1 | tail -8 >> $LOG; pack
for mode in fused two-call; do step "from $mode"
  python3 -m cpbench profile --from $T/cp4-bs1-ext8192-$mode --cell "cp4 bs1 ext8192" --run runs/engine-cell-fa3 >> $LOG 2>&1
  echo "rc $?" >> $LOG; done
step nsys
timeout 80 nsys profile --trace cuda,nvtx --sample none --cpuctxsw none --force-overwrite true -o $T/nsys/engine-fused \
  python3 $E --mode fused --cp 2 --bs 1 --extend-len 2048 --forwards 2 --profiler none --annotate nvtx --port 29733 \
  --out /tmp/unused 2>&1 | tail -3 >> $LOG
timeout 60 nsys export --type sqlite --force-overwrite true -o $T/nsys/engine-fused.sqlite $T/nsys/engine-fused.nsys-rep 2>&1 | tail -2 >> $LOG
python3 -m cpbench profile --from $T/nsys/engine-fused.sqlite --forward-range prefill_forward >> $LOG 2>&1; echo "rc $?" >> $LOG
ls -la $T $T/* >> $LOG; pack
step unannotated
timeout 60 python3 $E --mode fused --cp 4 --bs 1 --extend-len 8192 --forwards 3 --annotate none --port 29732 \
  --out $T/cp4-bs1-ext8192-fused-unannotated 2>&1 | grep -v USDT | tail -3 >> $LOG
python3 -m cpbench profile --from $T/cp4-bs1-ext8192-fused-unannotated >> $LOG 2>&1; echo "rc $?" >> $LOG; pack
if [ "${GPU_TESTS:-1}" = 1 ]; then step "gpu tests"
  timeout 150 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider tests/test_engine_trace_gpu.py >> $LOG 2>&1; fi
step end
