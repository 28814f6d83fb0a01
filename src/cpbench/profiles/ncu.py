"""Nsight Compute (``ncu``): argv for a profiled child, its version, and its raw CSV read back.

Flow (``studies/explain/measure.py`` owns the subprocesses; this module builds argv and parses text)::

    exe = find_ncu()                                   # None -> "ncu not found", exit 2
    subprocess.run(ncu_argv(exe, child, ranges, log)) # child wraps each forward in an NVTX range
    check_ncu_output(text)                             # ProfileError on ERR_NVGPUCTRPERM
    kernels = parse_ncu_csv(log.read_text(encoding="utf-8"))           # one dict per profiled kernel, in launch order

What ncu is asked for (``ncu_argv``): ``--nvtx --nvtx-include "cpbench@<range>/"`` per forward range
(push/pop ranges need the trailing ``/``; ``domain@range`` names the NVTX domain), ``--csv --page
raw --print-units base --metrics <METRICS>``, ``--target-processes all``, ``--cache-control none``
and ``--clock-control none`` (cpbench's sweeps neither flush L2 nor lock clocks, so the durations
compare with its timings), ``--log-file`` so the CSV is not mixed with the child's output.

Assumptions about ``--csv --page raw`` (ncu 2023.x-2025.x):

- Lines before the header (``==PROF==``, ``==WARNING==``, the child's prints when no log file is
  used) are skipped: the header is the first CSV line with an ``ID`` and a ``Kernel Name`` column.
- Columns: ``ID, Process ID, Process Name, Host Name, Kernel Name, Context, Stream, Block Size,
  Grid Size, Device, CC, [NVTX columns,] <metric names...>``. A units row may follow the header
  (empty ID, metric units such as ``nsecond``, ``%``, ``byte/block``); it gives each metric's unit.
- One row per profiled kernel, in launch order; numbers may carry thousands separators
  (``"1,234.5"``); a metric ncu could not collect is ``n/a`` (kept as None).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from cpbench.profiles.kernels import ProfileError
from cpbench.profiles.nsys import find_tool

NCU_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu")

# metric name -> short key used in cpbench's output (and its meaning)
METRICS = {
    "gpu__time_duration.sum": "duration",  # kernel duration (unit from the units row, reported in µs)
    "launch__grid_size": "grid",  # CTAs in the grid
    "launch__block_size": "block",  # threads per CTA
    "launch__registers_per_thread": "regs",
    "launch__shared_mem_per_block_static": "smem_static",  # bytes per CTA
    "launch__shared_mem_per_block_dynamic": "smem_dynamic",  # bytes per CTA
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",  # achieved occupancy, %
    "launch__waves_per_multiprocessor": "waves",  # grid / (SMs x CTAs per SM at the theoretical occupancy)
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "device__attribute_multiprocessor_count": "sms",
}
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
_TIME_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}


def find_ncu() -> str | None:
    """Path of an ``ncu`` executable: ``$PATH`` first, then Nsight Compute / CUDA install folders
    (newest first); None when there is none."""
    return find_tool("ncu", NCU_GLOBS)


def parse_ncu_version(text: str) -> str | None:
    """``"2025.3.1.0"`` from ``ncu --version`` output (``... Version 2025.3.1.0 (build ...)``), or None."""
    m = re.search(r"Version\s+([0-9][0-9.]*)", text or "")
    return m.group(1) if m else None


def nvtx_include(range_name: str, domain: str = "cpbench") -> str:
    """The ``--nvtx-include`` expression of a push/pop range: ``"cpbench@<range>/"``."""
    return f"{domain}@{range_name}/"


def ncu_argv(exe: str, child_argv: list[str], ranges: list[str], log_file: Path,
             metrics: list[str] | None = None, domain: str = "cpbench") -> list[str]:
    """argv running ``child_argv`` under ncu, profiling the kernels inside any of ``ranges`` (push/pop
    ranges of ``domain``); the raw CSV goes to ``log_file`` (module doc lists every flag)."""
    argv = [exe, "--nvtx"]
    for r in ranges:
        argv += ["--nvtx-include", nvtx_include(r, domain)]
    argv += ["--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics or list(METRICS)),
             "--target-processes", "all", "--cache-control", "none", "--clock-control", "none",
             "--log-file", str(log_file), *child_argv]
    return argv


def check_ncu_output(text: str) -> None:
    """Raise ProfileError when ncu's output says it could not read the GPU's counters.

    Raises:
        ProfileError: ``ERR_NVGPUCTRPERM`` in ``text`` (no permission to the performance counters).
    """
    if PERMISSION_ERROR in (text or ""):
        raise ProfileError("ncu cannot read the GPU performance counters here (ERR_NVGPUCTRPERM: needs admin "
                           "rights or NVreg_RestrictProfilingToAdminUsers=0); use `cpbench profile` for kernel "
                           "counts and times instead")


def _number(text: str) -> float | None:
    t = (text or "").strip().replace(",", "")
    if t in ("", "n/a", "N/A", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _is_header(rec: list[str]) -> bool:
    names = {c.strip() for c in rec}
    return "ID" in names and "Kernel Name" in names


def parse_ncu_csv(text: str, metrics: dict[str, str] | None = None) -> list[dict]:
    """Kernels of an ``ncu --csv --page raw`` report (module doc lists the assumptions).

    Returns:
        one dict per kernel in launch order: ``id`` (int), ``name`` (kernel name), ``block_size`` /
        ``grid_size`` (ncu's text, e.g. ``"(256, 1, 1)"``), ``nvtx`` (the NVTX columns' text joined,
        "" without them) and, per metric present, its short key from ``metrics`` (default
        :data:`METRICS`) as a float or None; ``duration`` is converted to µs with the units row
        (ns assumed without one). ``units``: metric name -> unit text.
    Raises:
        ProfileError: no header row, or a header without any of the metrics.
    """
    metrics = METRICS if metrics is None else metrics
    lines = [ln for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("==")]
    recs = list(csv.reader(io.StringIO("\n".join(lines))))
    start = next((i for i, r in enumerate(recs) if _is_header(r)), None)
    if start is None:
        raise ProfileError("no ncu raw CSV table (no header with 'ID' and 'Kernel Name'): did ncu profile any "
                           "kernel inside the NVTX ranges?")
    header = [c.strip() for c in recs[start]]
    col = {name: i for i, name in reversed(list(enumerate(header)))}
    if not any(m in col for m in metrics):
        raise ProfileError(f"the ncu CSV has none of the metrics {sorted(metrics)}")
    body = recs[start + 1:]
    units: dict[str, str] = {}
    if body and not body[0][col["ID"]].strip():
        units = {name: body[0][i].strip() for name, i in col.items() if i < len(body[0])}
        body = body[1:]
    nvtx_cols = [i for i, h in enumerate(header) if h.lower().startswith("nvtx") or h.startswith("thread Domain")]
    out = []
    for rec in body:
        if len(rec) < len(header) or not rec[col["ID"]].strip():
            continue
        k = {"id": int(_number(rec[col["ID"]]) or 0), "name": rec[col["Kernel Name"]],
             "block_size": rec[col["Block Size"]] if "Block Size" in col else "",
             "grid_size": rec[col["Grid Size"]] if "Grid Size" in col else "",
             "nvtx": " ".join(rec[i] for i in nvtx_cols if rec[i].strip())}
        for metric, key in metrics.items():
            k[key] = _number(rec[col[metric]]) if metric in col else None
        dur_metric = next((m for m, key in metrics.items() if key == "duration"), None)
        if k.get("duration") is not None and dur_metric:
            k["duration"] *= _TIME_TO_US.get(units.get(dur_metric, "nsecond"), 1e-3)
        out.append(k)
    for k in out:
        k["units"] = units
    return out


_NVTX_RANGE = re.compile(r'"([^":]*):([^"]*)"')
_FA3_TRAITS = re.compile(r"AttentionKernelTraits<\s*\w+,\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)")
_FA2_TRAITS = re.compile(r"KernelTraits<\s*\d+,\s*(\d+),\s*\d+,\s*\d+,\s*\d+,\s*(\d+),\s*\d+,\s*(\d+)")


def nvtx_ranges(text: str) -> list[tuple[str, str]]:
    """``(domain, message)`` of each push/pop range in ncu's NVTX column, outermost first.

    The column holds ``<tid>  "<domain>:<name>:<payload type>:<payload>:<color type>:<color>:<message
    type>:<message>"  ...`` (ncu 2025.3); the message is the text after the last ``:``."""
    return [(m.group(1), m.group(2).rsplit(":", 1)[-1]) for m in _NVTX_RANGE.finditer(text or "")]


def tiles_from_kernel_name(name: str) -> tuple[int, int] | None:
    """``(cta_tile_q, cta_tile_kv)`` carried by a FlashInfer kernel's template arguments, or None.

    flashinfer-fa3: ``AttentionKernelTraits<USE_TMA_LOAD_KV, HEAD_DIM_QK, HEAD_DIM_VO, CTA_Q, CTA_KV, ...>``;
    flashinfer-fa2: ``KernelTraits<MASK_MODE, CTA_TILE_Q, NUM_MMA_Q, NUM_MMA_D_QK, NUM_MMA_D_VO, NUM_MMA_KV,
    NUM_WARPS_Q, NUM_WARPS_KV, ...>`` with ``CTA_TILE_KV = NUM_MMA_KV * NUM_WARPS_KV * 16``
    (FlashInfer's ``attention/prefill.cuh``)."""
    m = _FA3_TRAITS.search(name or "")
    if m:
        return int(m.group(3)), int(m.group(4))
    m = _FA2_TRAITS.search(name or "")
    if m:
        return int(m.group(1)), int(m.group(2)) * int(m.group(3)) * 16
    return None


def group_calls(kernels: list[dict], calls: list[str], attention_patterns: tuple[str, ...],
                domain: str = "cpbench") -> list[dict]:
    """Assign profiled kernels (launch order) to attention calls (``calls``: their names in launch
    order, e.g. ``["prev", "next", "prev", "next", "combined", "combined"]``).

    A call begins at each attention kernel (name matches ``attention_patterns``, not a split-KV merge
    kernel); the merge kernels after it belong to it. ncu names a kernel without its namespaces (``void
    PrefillWithKVCacheKernel<SparseCollectiveMainloop<...``), so a pattern is matched without its own
    (``flashinfer::prefillwithkvcachekernel`` as ``prefillwithkvcachekernel``). Where ncu's NVTX column names the
    call range (eager forwards: ``prev``/``next``/``combined`` in ``domain``), it must agree. Returns ``[{"call": name, "index": i,
    "kernels": [...]}]``.

    Raises:
        ProfileError: a kernel before the first attention kernel, a number of attention kernels
            other than ``len(calls)``, or an NVTX call range that disagrees (the profile did not cover
            exactly the expected forwards).
    """
    from cpbench.profiles.kernels import CALL_NAMES, classify

    patterns = tuple(p.rsplit("::", 1)[-1] for p in attention_patterns)  # as ncu names kernels
    groups: list[dict] = []
    for k in kernels:
        kind = classify(k["name"], patterns)
        k["kind"] = kind
        if kind == "attention":
            call = calls[len(groups)] if len(groups) < len(calls) else "?"
            named = [msg for dom, msg in nvtx_ranges(k.get("nvtx", "")) if dom == domain and msg in CALL_NAMES]
            if named and call != "?" and named[-1] != call:
                raise ProfileError(f"ncu kernel {k['id']} ran inside NVTX range {named[-1]!r}, expected call {call!r} "
                                   "(the profile holds other forwards than the expected ones)")
            groups.append({"call": call, "index": len(groups), "kernels": []})
        elif not groups:
            raise ProfileError(f"ncu profiled {k['name'][:60]!r} before any attention kernel")
        groups[-1]["kernels"].append(k)
    if len(groups) != len(calls):
        raise ProfileError(f"ncu profiled {len(groups)} attention kernels, expected {len(calls)} "
                           f"(one per call: {', '.join(calls)})")
    return groups


__all__ = ["METRICS", "PERMISSION_ERROR", "check_ncu_output", "find_ncu", "group_calls", "ncu_argv",
           "nvtx_include", "nvtx_ranges", "parse_ncu_csv", "parse_ncu_version", "tiles_from_kernel_name"]


ATTN_KEYS = ("duration", "grid", "block", "regs", "smem_static", "smem_dynamic", "occupancy_pct", "waves",
             "sm_pct", "dram_pct", "sms")


def attention_call_rows(groups: dict[str, list[dict]], window_left_per_layer: list[int]) -> list[dict]:
    """One row per attention call: ``mode, layer, window_left, call``, the attention kernel's metrics
    (:data:`ATTN_KEYS`, duration in µs), ``merge_kernels`` / ``merge_us`` (split-KV merges after it),
    ``total_us`` (attention + merges) and ``kernel`` (its name).

    ``groups``: mode -> ncu.group_calls output of that mode's forward (calls in layer order)."""
    rows = []
    for mode, calls in groups.items():
        per_layer = len(calls) // max(len(window_left_per_layer), 1)
        for i, g in enumerate(calls):
            attn = next(k for k in g["kernels"] if k.get("kind") == "attention")
            merges = [k for k in g["kernels"] if k.get("kind") == "merge"]
            layer = i // max(per_layer, 1)
            row = {"mode": mode, "layer": layer, "window_left": window_left_per_layer[layer], "call": g["call"],
                   "kernel": attn["name"], **{k: attn.get(k) for k in ATTN_KEYS},
                   "merge_kernels": len(merges), "merge_us": sum(k.get("duration") or 0.0 for k in merges),
                   "other_kernels": len(g["kernels"]) - 1 - len(merges)}
            row["total_us"] = (row["duration"] or 0.0) + row["merge_us"]
            rows.append(row)
    return rows
