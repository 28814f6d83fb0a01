#!/usr/bin/env bash
# call 3: the segment-count stress axis on both kernels; explain (ncu) for trtllm-fmha-v2 and flashinfer-fa3
source .gpu/setup.sh
export PYTHONPATH=src:$PYTHONPATH MPLBACKEND=Agg
mkdir -p runs
log=$OUT/call3.log
{ echo "== stress"; t0=$(date +%s); timeout 300 python3 -m cpbench sweep --cp 4 --bs 1,2,4,8,16,32,64,128,256 --extend-len 512 --backend trtllm-fmha-v2,flashinfer-fa3 --out runs/h200-segments 2>&1 | tail -70; echo "stress wall $(( $(date +%s)-t0 )) s"
  for b in trtllm-fmha-v2 flashinfer-fa3; do echo "== explain $b"; t0=$(date +%s); timeout 120 python3 -m cpbench explain --cp 4 --bs 16 --extend-len 2048 --rank 0 --backend $b --out runs/h200-explain-${b#flashinfer-} 2>&1 | tail -40; echo "explain $b wall $(( $(date +%s)-t0 )) s"; done
} > $log 2>&1
rm -f runs/h200-explain-*/ncu_raw.csv.big
tar czf $OUT/runs3.tgz runs
ls -la $OUT; du -sh runs/*
