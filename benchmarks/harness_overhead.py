"""Harness overhead: cpbench's timing path vs a bare CUDA-event loop over the same attention calls.

Run on a GPU (same process, same prepared calls, same inputs):
    python benchmarks/harness_overhead.py --backend flashinfer-fa3 --seq 32768 --bs 1
Prints both medians and their difference; the target is <= 1% for forwards over 1 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from cpbench.kernels.backends import get_backend
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import get_preset
from cpbench.measure.timing import Clock, summarize, time_interleaved
from cpbench.kernels.workload import build_cell, rank_work


def bare_loop_us(layers, reps: int, barrier=None) -> list[float]:
    """Each sample: sync, (barrier,) event, every step of every layer, event (nothing else)."""
    calls = [step.fn for layer in layers for step in layer]
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        if barrier is not None:
            barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for fn in calls:
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="flashinfer-fa3")
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--cp", type=int, default=4)
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--seq", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    model, be, clock = get_preset(args.model), get_backend(args.backend), Clock(torch.device("cuda"))
    rows = []
    for seq in args.seq:
        ext = [seq] * args.bs
        cell = build_cell(model, ext, [0] * args.bs, page_size=model.page_size, dtype=torch.bfloat16, device="cuda")
        work = rank_work(cell, rank_geometry(ext, None, args.cp, 0))
        for mode in ("two-call", "fused"):
            prep = be.prepare(work, mode)
            prep.forward()
            bare_loop_us(prep.layers, 5)  # warm
            harness = []
            bare = []
            for _ in range(3):  # alternate blocks so drift hits both
                harness += time_interleaved({mode: prep.forward}, clock, warmup=1, budget_ms=1,
                                            min_reps=args.reps // 3, max_reps=args.reps // 3)[mode]
                bare += bare_loop_us(prep.layers, args.reps // 3)
            h, b = statistics.median(harness), statistics.median(bare)
            rows.append({"seq": seq, "bs": args.bs, "mode": mode, "harness_us": round(h, 1), "bare_us": round(b, 1),
                         "diff_pct": round(100 * (h - b) / b, 2), "harness_ci": summarize(harness)["latency_us_ci_low"]})
            print(json.dumps(rows[-1]))


if __name__ == "__main__":
    main()
