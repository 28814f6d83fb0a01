"""Write synthetic run directories in the results schema (no GPU, no torch), for plot/report/compare tests.

The default latency model is shaped like the real thing: launch overhead per attention call (eager:
8 µs, graph: 2 µs) plus compute ~ bs * seq^2 / cp, identical on every rank except rank 0, which is 4%
slower in fused mode (its two halves are the most unequal). Override with ``latency=``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

from cpbench.results.schema import SCHEMA_VERSION
from cpbench.results.store import RunDir

LAYERS = 36
PAGE = 64


def default_latency(model, backend, timing, cp, bs, seq, rank, mode) -> float:
    calls = 2 if mode == "two-call" else 1
    launch = LAYERS * calls * (8.0 if timing == "eager" else 2.0)
    compute = 2e-5 * bs * seq * seq / cp
    if mode == "fused" and rank == 0:
        compute *= 1.04
    return launch + compute + 10.0 * rank / cp


def manifest(**over) -> dict:
    m = {"schema_version": SCHEMA_VERSION, "cpbench_version": "0.1.0", "git_commit": "abc1234",
         "command": "cpbench sweep --cp 2,4 --bs 1,4,16 --seq 1024,8192,65536 --backend flashinfer-fa3",
         "created": "2025-01-01T00:00:00Z", "python": "3.11.7", "torch": "2.11.0", "cuda": "13.0",
         "driver": "580.65", "flashinfer": "0.7.2.post1", "gpu_name": "NVIDIA H200",
         "compute_capability": "9.0", "cpu": "x86_64", "timing_method": "cuda events, ABBA",
         "gemm_peak": {"gemm_tflops": 700.0, "gemm_shape": [8192, 8192, 8192], "gemm_dtype": "bfloat16",
                       "gemm_reps": 20, "gemm_timer": "CUDA events"}}
    m.update(over)
    return m


def make_rows(*, cp_sizes=(2, 4), bss=(1, 4, 16), seqs=(1024, 8192, 65536), timings=("eager", "graph"),
              models=("gpt-oss-120b",), backends=("flashinfer-fa3",), prefix_len=0,
              latency: Callable = default_latency, status: Optional[Callable] = None,
              n_samples: int = 40, noise: float = 0.01, seed: int = 0) -> list[dict]:
    """Rows for every model x backend x timing x cp x bs x seq x rank x mode.

    ``latency(model, backend, timing, cp, bs, seq, rank, mode) -> µs`` (the true median);
    ``status(same args) -> (status, reason) | None`` marks rows that did not run.
    ``noise``: relative sd of the samples (0: every sample equals the median).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for model in models:
        for backend in backends:
            for timing in timings:
                for cp in cp_sizes:
                    for bs in bss:
                        for seq in seqs:
                            for rank in range(cp):
                                for mode in ("two-call", "fused"):
                                    args = (model, backend, timing, cp, bs, seq, rank, mode)
                                    st = status(*args) if status else None
                                    rows.append(_row(args, prefix_len, latency(*args), st, n_samples,
                                                     noise, rng))
    return rows


def _row(args, prefix_len, lat, st, n, noise, rng) -> dict:
    model, backend, timing, cp, bs, seq, rank, mode = args
    ctx = seq + prefix_len
    width = math.ceil(ctx / PAGE)
    fused = mode == "fused"
    row = {"schema_version": SCHEMA_VERSION, "model": model, "backend": backend, "timing": timing,
           "dtype": "bf16", "launch": "simulated", "world_size": 1, "seed": 0, "gather": "none",
           "fused_order": "prev-next", "tp_size": 1, "batch": 0,
           "cp_size": cp, "bs": bs, "max_extend_len": seq, "prefix_len": prefix_len,
           "extend_lens": ",".join([str(seq)] * bs), "rank": rank, "mode": mode, "page_size": PAGE,
           "status": "ok", "reason": "", "num_layers": LAYERS, "calls_per_layer": 1 if fused else 2,
           "context_len": ctx, "page_table_bytes": bs * width * 4,
           "dup_copy_us": 3.0 + bs * width * 1e-3 if fused else None,
           "kv_cache_bytes": bs * width * PAGE * 8 * 64 * 2 * 2,
           "samples_us": None}  # the CSV writer needs the key on every row (NaN breaks its CSV)
    if st is not None:
        row.update(status=st[0], reason=st[1])
        return row
    samples = lat * (1.0 + noise * rng.standard_normal(n)) if noise else np.full(n, float(lat))
    med = float(np.median(samples))
    row.update(
        latency_us_median=med, latency_us_p10=float(np.percentile(samples, 10)),
        latency_us_p90=float(np.percentile(samples, 90)), latency_us_ci_low=med * 0.995,
        latency_us_ci_high=med * 1.005, n_samples=n, samples_us=[float(s) for s in samples],
        flops=1e9,
        host_launch_us=LAYERS * row["calls_per_layer"] * 6.0 if timing == "eager" else 15.0,
        setup_us_metadata=40.0, setup_us_page_table=15.0 + (row["dup_copy_us"] or 0.0),
        setup_us_plan=120.0 * row["calls_per_layer"], peak_mem_bytes=1 << 20, max_abs_err=1e-3,
        sm_clock_mhz_before=1980.0, sm_clock_mhz_after=1980.0,
        attn_kernels=LAYERS * row["calls_per_layer"], other_kernels=0,
        launches=LAYERS * row["calls_per_layer"])
    row["setup_us_total"] = row["setup_us_metadata"] + row["setup_us_page_table"] + row["setup_us_plan"]
    calls = row["calls_per_layer"]
    mem = {"page_table": 2 * bs * width * 4 if fused else 0, "metadata": 2048 * calls, "plan": (8 << 20) * calls,
           "workspace": 256 << 20, "outputs": bs * seq // cp * 64 * 64 * 2 * 2, "comm": 0, "other": 0}
    row.update({f"setup_mem_{k}": float(v) for k, v in mem.items()})
    row.update(setup_mem_bytes=float(sum(mem.values())), forward_mem_bytes=0.0, mem_reason="",
               peak_mem_bytes=float(sum(mem.values())))
    return row


def write_run(run_dir: Path, rows: Iterable[dict], *, fmt: str = "parquet", manifest_over: dict | None = None,
              with_manifest: bool = True) -> Path:
    """Write ``rows`` as a run directory (``fmt``: ``parquet`` (+csv) or ``jsonl``) and a manifest."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = list(rows)
    if fmt == "jsonl":
        for r in rows:
            RunDir(run_dir).append(r)
    else:
        RunDir(run_dir).write_tables(rows)
    if with_manifest:
        (run_dir / "manifest.json").write_text(json.dumps(manifest(**(manifest_over or {})), indent=1))
    return run_dir


def make_run(run_dir: Path, fmt: str = "parquet", manifest_over: dict | None = None, **kw) -> Path:
    """``write_run(run_dir, make_rows(**kw))``: a complete synthetic run directory."""
    return write_run(run_dir, make_rows(**kw), fmt=fmt, manifest_over=manifest_over)
