"""Tidy results and the run directory (versioned on-disk format, read without a GPU).

A run directory holds ``results.jsonl`` (appended and flushed row by row while a sweep runs),
``results.parquet`` and ``results.csv`` (written at the end), ``manifest.json``, ``profiles/``,
``plots/`` and ``report.md``. One row per cell x rank x backend x mode x timing mode.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Iterable

import pandas as pd

from cpbench.errors import CpbenchInputError, CpbenchWarning

SCHEMA_VERSION = 1
MODES = ("two-call", "fused")
STATUSES = ("ok", "ineligible", "unsupported", "oom", "mismatch", "error")
# the columns that identify a row; a resumed sweep skips rows whose key is already on disk
KEY_COLUMNS = ("model", "backend", "timing", "cp_size", "bs", "seq_len", "prefix_len", "seq_lens",
               "rank", "mode")
CELL_COLUMNS = ("model", "backend", "timing", "cp_size", "bs", "seq_len", "prefix_len", "seq_lens")

# Documented columns (units in the name): what the runner writes and plots/report/compare read.
COLUMNS = {
    "schema_version": "int, results format version",
    "model": "preset or config name", "backend": "torch | fa2 | fa3 | trtllm-gen",
    "timing": "eager | graph", "dtype": "bf16 | fp16 | fp32",
    "cp_size": "int", "bs": "requests in the batch", "seq_len": "tokens per request (max if uneven)",
    "prefix_len": "cached prefix tokens per request", "seq_lens": "extend lengths, comma-separated",
    "rank": "int", "mode": "two-call | fused", "page_size": "tokens",
    "status": " | ".join(STATUSES), "reason": "why not ok",
    "latency_us_median": "forward latency (all layers), µs", "latency_us_p10": "µs",
    "latency_us_p90": "µs", "latency_us_ci_low": "95% CI of the median, µs", "latency_us_ci_high": "µs",
    "n_samples": "timed forwards", "samples_us": "every raw sample, µs",
    "per_layer_us": "latency_us_median / num_layers", "tflops": "TFLOP/s from per-segment causal areas",
    "flops": "FLOPs per forward", "host_launch_us": "host time to enqueue one eager forward, µs",
    "setup_us_metadata": "µs", "setup_us_page_table": "µs", "setup_us_plan": "µs", "setup_us_total": "µs",
    "peak_mem_bytes": "peak device memory over the forward minus before, bytes",
    "page_table_bytes": "bytes of [bs, W]", "page_table_dup_bytes": "bytes of [2*bs, W] (fused only)",
    "dup_copy_us": "measured time of cat(page_table, page_table), µs (fused only)",
    "kv_cache_bytes": "one layer's K+V cache, bytes", "context_len": "tokens the table is sized for",
    "tokens_logical": "local query rows", "tokens_padded": "rows padded to a multiple of 2*cp_size",
    "max_kv_len": "tokens", "num_layers": "int", "calls_per_layer": "attention calls per layer",
    "max_abs_err": "vs the fp32 torch reference (NaN: not checked)",
    "sm_clock_mhz_before": "MHz (NaN: unknown)", "sm_clock_mhz_after": "MHz", "clock_drop": "bool, >10%",
    "attn_kernels": "attention kernels per forward (GPU executions; torch backend: calls)",
    "attn_kernels_expected": "layers x calls per layer x kernels_per_call", "kernels_per_call": "int",
    "attn_calls": "prev/next/combined ranges per forward", "kernels": "GPU kernel executions per forward",
    "merge_kernels": "split-KV merges", "fill_kernels": "fills/memsets", "copy_kernels": "copies",
    "diff_vs_two_call": "max |fused - two-call| output (fused rows)", "kv_buffers": "distinct KV caches the layers rotate",
    "latency_us_mean": "µs", "trace": "Chrome trace path (cpbench profile)",
    "other_kernels": "non-attention kernels per forward", "launches": "CPU launch calls per forward",
}


def append_row(path: Path, row: dict) -> None:
    """Append one row to ``results.jsonl`` and flush it to disk (a kill loses no measured row). A torn
    last line (a kill mid-write: no row was completed) is cut off first, so the new row starts its own line."""
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.seek(0)
                f.truncate(f.read().rfind(b"\n") + 1)
        f.write((json.dumps(_jsonable(row)) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def _jsonable(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


_WARNED: set[tuple[str, tuple[int, ...]]] = set()


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a ``results.jsonl``; a torn last line (killed mid-write) is ignored. Other lines that are
    not JSON objects are skipped with a :class:`CpbenchWarning` naming them (the rows around them stay)."""
    rows = []
    if not path.exists():
        return rows
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise CpbenchInputError(f"{str(path)!r} is not UTF-8 text: it is not a cpbench results file") from None
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    bad = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        elif line.strip() and i != last:
            bad.append(i + 1)
    if bad and (str(path), tuple(bad)) not in _WARNED:  # once per file and set of lines in a process
        _WARNED.add((str(path), tuple(bad)))
        shown = ", ".join(map(str, bad[:10])) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else "")
        warnings.warn(f"{path}: line {shown} is not a result row and was skipped", CpbenchWarning, stacklevel=2)
    return rows


def latest_rows(path: Path) -> list[dict]:
    """Rows of a ``results.jsonl`` deduplicated by :func:`row_key`, the last written row winning (a
    resumed sweep may re-measure a row)."""
    return list({row_key(r): r for r in read_jsonl(path)}.values())


def row_key(row: dict) -> tuple:
    return tuple(str(row.get(c)) for c in KEY_COLUMNS)


def read_manifest(path: Path) -> dict:
    """``manifest.json`` as a dict ({} when absent). A ``config`` that is not an object becomes {}, and a
    ``resumed_by``/``sweep_wall_s`` that is not a list becomes [] (hand-edited files).

    Raises:
        CpbenchInputError: the file is not UTF-8 JSON holding an object.
    """
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        manifest = None
    if not isinstance(manifest, dict):
        raise CpbenchInputError(f"{str(path)!r} is not a cpbench manifest (a JSON object): restore it, or delete "
                                "it (the results stay readable)")
    if not isinstance(manifest.get("config", {}), dict):
        manifest["config"] = {}
    for key in ("resumed_by", "sweep_wall_s"):
        if key in manifest and not isinstance(manifest[key], list):
            manifest[key] = []
    return manifest


def load_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """Load a run directory: ``(results frame, manifest dict)``.

    Reads ``results.parquet``, or ``results.jsonl`` (deduplicated by row key, last wins) when there is no
    parquet or the jsonl holds rows the parquet lacks (a sweep interrupted after the tables were
    written; a :class:`CpbenchWarning` says so).
    Raises:
        CpbenchInputError: missing directory, no results, or another schema version.
    """
    d = Path(run_dir)
    if not d.is_dir():
        what = "is a file" if d.exists() else "does not exist"
        raise CpbenchInputError(f"run directory {str(d)!r} {what}: pass a directory made by cpbench sweep")
    manifest = read_manifest(d / "manifest.json")
    rows = latest_rows(d / "results.jsonl")
    df = None
    if (d / "results.parquet").exists():
        try:
            df = pd.read_parquet(d / "results.parquet")
        except Exception as e:  # pyarrow raises its own types for a corrupt file
            raise CpbenchInputError(f"{str(d / 'results.parquet')!r} cannot be read ({type(e).__name__}): "
                                    "delete it to fall back to results.jsonl") from None
        if len(rows) > len(df):
            warnings.warn(f"{d / 'results.jsonl'} holds {len(rows)} rows, results.parquet {len(df)} (a sweep was "
                          "interrupted): reading results.jsonl", CpbenchWarning, stacklevel=2)
            df = None
    if df is None:
        if not rows:
            raise CpbenchInputError(f"{str(d)!r} holds no results (results.jsonl/parquet): run cpbench sweep first")
        df = pd.DataFrame(rows)
    if df.empty:
        raise CpbenchInputError(f"{str(d)!r} holds no result rows")
    raw = df.get("schema_version", pd.Series([manifest.get("schema_version")])).dropna()
    versions = {int(v) if math.isfinite(v) and v == int(v) else -1  # 1.7, inf, "x": not a schema we read
                for v in pd.to_numeric(raw, errors="coerce").fillna(-1).astype(float)}
    if versions and versions != {SCHEMA_VERSION}:
        raise CpbenchInputError(
            f"{str(d)!r} uses results schema {sorted(versions)}, this cpbench reads {SCHEMA_VERSION}: "
            "re-run the sweep or use the matching cpbench version")
    return df, manifest


def write_tables(run_dir: Path, rows: Iterable[dict]) -> pd.DataFrame:
    """Write ``results.parquet`` and ``results.csv`` (samples as a JSON list in CSV); return the frame."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df
    df.to_parquet(run_dir / "results.parquet", index=False)
    csv = df.copy()
    if "samples_us" in csv:
        csv["samples_us"] = csv["samples_us"].map(
            lambda s: json.dumps([float(x) for x in s]) if hasattr(s, "__len__") and not isinstance(s, str) else "")
    csv.to_csv(run_dir / "results.csv", index=False)
    return df


def critical_path(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell (model, backend, timing, cp_size, bs, seq_len, prefix, seq_lens): the slowest rank per
    mode (the critical path), ``speedup = two_call_us / fused_us`` on it, and rank imbalance max/min.

    A cell whose rows are not all ``ok`` gets ``status`` = the first non-ok status and NaN latencies.
    Columns: ``two_call_us, fused_us, speedup, slowest_rank_two_call, slowest_rank_fused,
    imbalance_two_call, imbalance_fused, status, reason``.
    """
    if df.empty:
        return pd.DataFrame()
    for col in ("latency_us_median", "reason"):
        if col not in df.columns:  # e.g. a run in which no cell was measured
            df = df.assign(**{col: math.nan if col.startswith("latency") else ""})
    keys = [c for c in CELL_COLUMNS if c in df.columns]
    out = []
    for cell, g in df.groupby(keys, dropna=False, sort=True):
        rec = dict(zip(keys, cell if isinstance(cell, tuple) else (cell,)))
        bad = g[g["status"] != "ok"]
        rec["status"] = bad["status"].iloc[0] if len(bad) else "ok"
        rec["reason"] = str(bad["reason"].iloc[0]) if len(bad) else ""
        for mode, tag in (("two-call", "two_call"), ("fused", "fused")):
            m = g[(g["mode"] == mode) & (g["status"] == "ok")]
            lat = pd.to_numeric(m["latency_us_median"], errors="coerce")
            if len(m) and not (lat > 0).all():  # an ok row without a positive latency is not usable
                m, lat = m.iloc[0:0], lat.iloc[0:0]
            if len(m) and not len(bad):
                i = lat.idxmax()
                rec[f"{tag}_us"] = float(lat.max())
                rec[f"slowest_rank_{tag}"] = int(m.loc[i, "rank"])
                rec[f"imbalance_{tag}"] = float(lat.max() / lat.min()) if lat.min() > 0 else math.nan
            else:
                rec[f"{tag}_us"] = math.nan
                rec[f"slowest_rank_{tag}"] = -1
                rec[f"imbalance_{tag}"] = math.nan
        rec["speedup"] = (rec["two_call_us"] / rec["fused_us"]
                          if rec["fused_us"] and math.isfinite(rec["fused_us"]) else math.nan)
        out.append(rec)
    return pd.DataFrame(out)
