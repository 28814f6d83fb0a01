"""The run's matmul peak (measure/peak.py): a finite best-of-rounds rate with every round kept, and NaN with
a reason instead of a failed run."""

import math

import torch

from cpbench.measure import peak


def test_cpu_peak_is_the_best_round_and_keeps_every_round():
    out = peak.gemm_peak(torch.device("cpu"), torch.bfloat16, reps=2, rounds=3)
    assert out["gemm_shape"] == [peak.CPU_SHAPE] * 3 and out["gemm_dtype"] == "float32"  # fp32 on CPU
    assert out["gemm_timer"] == "time.perf_counter" and len(out["gemm_tflops_rounds"]) == 3
    assert out["gemm_tflops"] > 0 and out["gemm_tflops"] == max(out["gemm_tflops_rounds"])


def test_a_failed_measurement_is_nan_with_its_reason(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("out of memory while timing")
    monkeypatch.setattr(torch, "mm", boom)
    out = peak.gemm_peak(torch.device("cpu"), torch.float32, reps=1, rounds=1)
    assert math.isnan(out["gemm_tflops"]) and out["gemm_error"] == "out of memory while timing"
