#!/usr/bin/env bash
# call 2: trtllm-fmha-v2 and flashinfer-fa3 on the same cells, cp 2 and cp 8, profile --nsys counts
source .gpu/setup.sh
export PYTHONPATH=src:$PYTHONPATH MPLBACKEND=Agg
mkdir -p runs
log=$OUT/call2.log
{ echo "== multi"; t0=$(date +%s); timeout 240 python3 -m cpbench sweep --cp 4 --bs 1,4,16 --backend trtllm-fmha-v2,flashinfer-fa3 --out runs/h200-fmha-v2-vs-fa3 2>&1 | tail -60; echo "multi wall $(( $(date +%s)-t0 )) s"
  echo "== cp2 cp8"; t0=$(date +%s); timeout 200 python3 -m cpbench sweep --cp 2,8 --bs 1,4,16 --out runs/h200-fmha-v2-cp2-cp8 2>&1 | tail -40; echo "cp2/8 wall $(( $(date +%s)-t0 )) s"
  echo "== profile nsys"; t0=$(date +%s); timeout 120 python3 -m cpbench profile --cp 4 --bs 1 --extend-len 8192 --nsys --out runs/h200-fmha-v2-profile 2>&1 | tail -40; echo "profile wall $(( $(date +%s)-t0 )) s"
} > $log 2>&1
rm -f runs/h200-fmha-v2-profile/*.nsys-rep.big 2>/dev/null
tar czf $OUT/runs2.tgz runs
ls -la $OUT; du -sh runs/*
