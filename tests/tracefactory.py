"""Hand-built torch.profiler (kineto) traces with known contents, for tests of ``cpbench profile --from``.

A forward is ``layers`` layers; each layer launches a GEMM, with ``all_gather`` an NCCL all-gather (CP's K|V
gather), ``per_layer`` FMHAv2 attention kernels (the window
layers' kernel name says ``sliding_or_chunked_causal``, as FMHAv2's does), one memset and a GEMM. Every
kernel has its launch call (``cuda_runtime``, same correlation id). Attention kernels last ``window_us`` on
window layers (even) and ``full_us`` on full layers (odd), split evenly over the layer's kernels.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

ATTN = "fmha_v2_flash_attention_bf16_64_256_S_q_paged_kv_64_{}causal_output_bf16_tma_ws_sm90_kernel"
ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def events(*, layers=4, per_layer=1, forwards=2, annotate=True, window_us=10.0, full_us=30.0, extra=(), all_gather=False):
    """The ``traceEvents`` of one rank: ``forwards`` forwards (each a ``ProfilerStep#N`` range when
    ``annotate``), then the kernels in ``extra`` (names) after the last forward."""
    out, ts, corr = [], 1000.0, 0

    def kernel(name, dur):
        nonlocal ts, corr
        corr += 1
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2,
                    "args": {"correlation": corr}})
        out.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts + 5, "dur": dur, "args": {"correlation": corr}})
        ts += dur + 10

    for f in range(forwards):
        t0 = ts
        for i in range(layers):
            kernel(GEMM, 20.0)
            if all_gather:
                kernel(ALL_GATHER, 5.0)
            for _ in range(per_layer):
                window = i % 2 == 0
                kernel(ATTN.format("sliding_or_chunked_" if window else ""), (window_us if window else full_us) / per_layer)
                kernel("Memset (Device)", 1.0)
            kernel(GEMM, 20.0)
        if annotate:
            out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{f + 1}", "ts": t0 - 1,
                        "dur": ts - t0})
        ts += 100
    for name in extra:
        kernel(name, 3.0)
    out.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000.0, "dur": 1})
    return out


def write(path: Path, rank=0, world_size=2, *, base_ns=1_790_000_000_000_000_000, backend="nccl", gz=True,
          subgroups=(), **kw) -> Path:
    """A kineto-shaped trace file (``distributedInfo`` and ``baseTimeNanoseconds`` before ``traceEvents``, as
    kineto writes them); ``subgroups``: ``(pg_name, ranks)`` of the groups besides the default one that this rank
    is in (kineto lists only a rank's own groups); ``**kw`` go to :func:`events`."""
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world_size, "ranks": list(range(world_size))}]
    groups += [{"pg_name": name, "pg_desc": "undefined", "pg_size": len(ranks), "ranks": list(ranks)}
               for name, ranks in subgroups]
    doc = {"schemaVersion": 1, "deviceProperties": [],
           "distributedInfo": {"backend": backend, "rank": rank, "world_size": world_size, "pg_count": len(groups),
                               "pg_config": groups},
           "baseTimeNanoseconds": base_ns, "traceEvents": events(**kw), "traceName": str(path)}
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_run(directory: Path, world_size=2, **kw) -> Path:
    """One trace per rank in ``directory`` (SGLang's names: ``<id>-TP-<rank>.trace.json.gz``)."""
    for r in range(world_size):
        write(directory / f"1796213131-TP-{r}.trace.json.gz", r, world_size, **kw)
    return directory


def write_nsys_sqlite(path: Path, pids=(4242, 4243), *, layers=4, per_layer=1, forwards=2, nvtx="prefill_forward") -> Path:
    """A minimal nsys SQLite export (the tables and columns ``nsys export --type sqlite`` writes that the reader
    uses; times in ns): per process ``forwards`` NVTX push/pop ranges named ``nvtx``, each over :func:`events`'
    kernels, launch calls in CUPTI_ACTIVITY_KIND_RUNTIME with the kernels' correlation ids."""
    import sqlite3

    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, correlationId INT,"
        " globalPid INT, demangledName INT, shortName INT);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, correlationId INT, nameId INT);"
        "CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, textId INT, globalTid INT,"
        " domainId INT);")
    names: dict[str, int] = {}

    def sid(text):
        if text not in names:
            names[text] = len(names) + 1
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (names[text], text))
        return names[text]

    for pid in pids:
        gtid = (pid << 24) | pid  # nsys's serialised id: the PID in bits 24-47, the TID below
        evs = events(layers=layers, per_layer=per_layer, forwards=forwards)
        for e in evs:
            ns = int(e["ts"] * 1000) + pid  # the processes' clocks are one report's: offsets only
            if e["cat"] == "kernel":
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,0,7,?,?,?,?)",
                            (ns, ns + int(e["dur"] * 1000), e["args"]["correlation"], gtid & ~0xFFFFFF, sid(e["name"]),
                             sid(e["name"][:20])))
            elif e["cat"] == "cuda_runtime":
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?)",
                            (ns, ns + 2000, gtid, e["args"]["correlation"], sid("cudaLaunchKernel_v7000")))
            elif e["cat"] == "user_annotation":
                con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,59,?,NULL,?,0)", (ns, ns + int(e["dur"] * 1000), nvtx, gtid))
    con.commit()
    con.close()
    return path
