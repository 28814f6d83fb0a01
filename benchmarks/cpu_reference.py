"""CPU reference: one TorchBackend forward with the old (explicit) and the SDPA attention path.

    PYTHONPATH=src python benchmarks/cpu_reference.py [--model gpt-oss-120b --cp 4 --seq 512 --rank 0]

bf16 cell as the sweep's default dtype; the minimum over ``--reps`` forwards (the CPU is shared: the
minimum is the least disturbed). Three timings per mode: the old path on one intra-op thread and the
SDPA path on one thread (as the CPU sweep runs them), and the SDPA path on every core this process may
use (``--threads``, default: all of them; what ``OMP_NUM_THREADS`` gives a sweep on an idle machine).
Prints one JSON line per mode.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from unittest import mock

import torch

from cpbench.kernels.backends import torch_ref
from cpbench.kernels.backends.torch_ref import TorchBackend
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import get_preset
from cpbench.kernels.workload import build_cell, rank_work


def best_ms(fn, reps: int) -> float:
    fn()  # warm
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--cp", type=int, default=4)
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="threads of the last timing (0: every usable core)")
    args = ap.parse_args()
    threads_all = args.threads or len(os.sched_getaffinity(0))
    model = get_preset(args.model)
    ext = [args.seq] * args.bs
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    cell = build_cell(model, ext, [0] * args.bs, page_size=model.page_size, dtype=dtype, device="cpu")
    work = rank_work(cell, rank_geometry(ext, None, args.cp, args.rank))
    sdpa, old = torch_ref.attend_sdpa, torch_ref.attend_reference
    for mode in ("two-call", "fused"):
        times, outs = {}, {}
        for name, fn, threads in (("old", old, 1), ("sdpa_1t", sdpa, 1), ("sdpa", sdpa, threads_all)):
            torch.set_num_threads(threads)
            with mock.patch.object(torch_ref, "attend", lambda *a, _f=fn, **k: _f(*a, **k)):
                prep = TorchBackend().prepare(work, mode)
                times[name] = best_ms(prep.forward, args.reps)
                outs[name] = {w: o.float().clone() for w, o in prep.outputs.items()}
        diff = max((outs["old"][w] - outs["sdpa"][w]).abs().max().item() for w in outs["old"])
        print(json.dumps({"model": args.model, "cp": args.cp, "bs": args.bs, "seq": args.seq, "rank": args.rank,
                          "mode": mode, "dtype": args.dtype, "threads": threads_all,
                          "old_1thread_ms": round(times["old"], 1), "sdpa_1thread_ms": round(times["sdpa_1t"], 1),
                          "sdpa_all_threads_ms": round(times["sdpa"], 1),
                          "speedup_same_threads": round(times["old"] / times["sdpa_1t"], 2),
                          "speedup_all_threads": round(times["old"] / times["sdpa"], 2), "max_abs_diff": diff}),
              flush=True)

if __name__ == "__main__":
    main()
