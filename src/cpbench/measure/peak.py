"""The device's measured matmul peak, once per run: the denominator of "% of peak" for attention
TFLOP/s (a measured GEMM rather than a datasheet number, so clocks, power limits and the torch/cuBLAS
build are the same as for the attention kernels).
"""

from __future__ import annotations

import math
import time

import torch

GPU_SHAPE = 8192  # M = N = K: large enough to reach cuBLAS's plateau on Hopper/Blackwell (2*8192^3 FLOP)
CPU_SHAPE = 512   # keeps the CPU measurement well under a second on 2 cores


def gemm_peak(device: torch.device, dtype: torch.dtype, reps: int = 20, rounds: int = 5) -> dict:
    """Best-of-``rounds`` throughput of ``reps`` back-to-back ``[n, n] @ [n, n]`` matmuls in ``dtype``
    on ``device`` (n = :data:`GPU_SHAPE` on CUDA, :data:`CPU_SHAPE` on CPU; fp32 on CPU, where bf16
    matmul is not what the reference uses).

    Returns ``{"gemm_tflops": float (TFLOP/s, 1e12 FLOP/s, 2*n^3 FLOP per matmul; the best round),
    "gemm_tflops_rounds": [the TFLOP/s of each round], "gemm_shape": [n, n, n],
    "gemm_dtype": str, "gemm_reps": reps, "gemm_timer": "CUDA events" | "time.perf_counter"}``; on any
    failure (e.g. out of memory) ``gemm_tflops`` is NaN and ``gemm_error`` says why, so a run never
    fails for its denominator.
    """
    cuda = device.type == "cuda"
    n = GPU_SHAPE if cuda else CPU_SHAPE
    dt = dtype if cuda else torch.float32
    out = {"gemm_shape": [n, n, n], "gemm_dtype": str(dt).replace("torch.", ""), "gemm_reps": reps,
           "gemm_timer": "CUDA events" if cuda else "time.perf_counter"}
    try:
        a = torch.randn(n, n, device=device, dtype=dt)
        b = torch.randn(n, n, device=device, dtype=dt)
        c = torch.empty(n, n, device=device, dtype=dt)
        for _ in range(3):
            torch.mm(a, b, out=c)
        times = []
        for _ in range(rounds):
            if cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(reps):
                    torch.mm(a, b, out=c)
                e1.record()
                e1.synchronize()
                s = e0.elapsed_time(e1) / 1e3
            else:
                t0 = time.perf_counter()
                for _ in range(reps):
                    torch.mm(a, b, out=c)
                s = time.perf_counter() - t0
            times.append(s)
        rate = [2.0 * n ** 3 * reps / t / 1e12 for t in times]
        out["gemm_tflops"] = max(rate)
        out["gemm_tflops_rounds"] = rate  # the spread behind the best round
        del a, b, c
    except Exception as e:  # the denominator is optional: record why it is missing
        out["gemm_tflops"] = math.nan
        out["gemm_error"] = " ".join(str(e).split())[:200]
    finally:
        if cuda:
            torch.cuda.empty_cache()
    return out
