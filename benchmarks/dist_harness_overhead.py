"""Distributed harness overhead: cpbench's per-rank timing path in a torchrun launch (agreed repeat
counts, a barrier before each sample, CUDA events) vs a bare per-rank loop (sync, barrier, event,
the forward's steps, event; harness_overhead.bare_loop_us) over the same prepared gather + KV write +
attention steps.

Run on a machine with N GPUs:
    torchrun --standalone --nproc-per-node 2 benchmarks/dist_harness_overhead.py --backend flashinfer-fa3 --seq 8192
Rank 0 prints one JSON line per (seq, mode): both medians over ranks' slowest sample and their
difference; the target is <= 1% for forwards over 1 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.distributed as dist

from cpbench.kernels.backends import get_backend
from cpbench.ranks import process_groups as groups
from cpbench.ranks.torchrun_group import TorchrunGroup
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import get_preset
from cpbench.measure.timing import Clock, time_interleaved
from cpbench.kernels.workload import build_cell, rank_work
from harness_overhead import bare_loop_us  # benchmarks/: the script's folder is on sys.path


def critical(samples: list[float]) -> float:
    """Median over samples of the maximum over ranks (rank 0 gets it; others get NaN)."""
    every = groups.all_gather_object_gloo(samples)
    return statistics.median(max(xs) for xs in zip(*every))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="flashinfer-fa3")
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--seq", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--gather", default="packed")
    args = ap.parse_args()
    info = groups.init_process_group_from_env(None, 300)
    group = TorchrunGroup(info, args.gather)
    cp = info.world_size
    model, be, clock = get_preset(args.model), get_backend(args.backend), Clock(info.device)
    for seq in args.seq:
        ext = [seq] * args.bs
        group.begin_cell(f"seq{seq}", cp)
        cell = build_cell(model, ext, [0] * args.bs, page_size=model.page_size, dtype=torch.bfloat16,
                          device=info.device)
        work = rank_work(cell, rank_geometry(ext, None, cp, info.rank))
        for mode in ("two-call", "fused"):
            ex = group.exchange(work, mode)
            ex.check()
            prep = be.prepare(work, mode).with_steps_before(ex)
            prep.forward()
            bare_loop_us(prep.layers, 5, group.barrier)  # warm
            harness, bare = [], []
            for _ in range(3):  # alternate blocks so drift hits both
                harness += time_interleaved({mode: prep.forward}, clock, warmup=1, budget_ms=1,
                                            min_reps=args.reps // 3, max_reps=args.reps // 3,
                                            agree=group.agree, barrier=group.barrier)[mode]
                bare += bare_loop_us(prep.layers, args.reps // 3, group.barrier)
            h, b = critical(harness), critical(bare)
            if info.rank == 0:
                print(json.dumps({"seq": seq, "bs": args.bs, "cp": cp, "mode": mode, "gather": args.gather,
                                  "harness_us": round(h, 1), "bare_us": round(b, 1),
                                  "diff_pct": round(100 * (h - b) / b, 2)}), flush=True)
    dist.barrier(group=groups.gloo_group())
    groups.destroy()


if __name__ == "__main__":
    main()
