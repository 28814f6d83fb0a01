"""Shape a results frame for charts and the report (pandas only; no matplotlib, no torch).

``prepare`` makes any results frame safe to read (missing columns added as NaN, keys normalised);
``cells`` is the critical-path view (slowest rank per mode) with that rank's p10/p90 added. Inside
``one_view()`` (a report: charts, tables and summary read the same rows) each is computed once per frame.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pandas as pd

from cpbench.domain.modes import MODES, Status, Timing
from cpbench.results.critical_path import critical_path
from cpbench.results.schema import CELL_COLUMNS, COLUMNS
from cpbench.results.verdicts import on_cpu  # noqa: F401 (the report's predicate; compare's too)

NUMERIC = ["latency_us_median", "latency_us_p10", "latency_us_p90", "latency_us_ci_low",
           "latency_us_ci_high", "per_layer_us", "tflops", "host_launch_us", "setup_us_metadata",
           "setup_us_page_table", "setup_us_plan", "setup_us_total", "peak_mem_bytes", "page_table_bytes",
           "page_table_dup_bytes", "dup_copy_us", "kv_cache_bytes", "context_len", "attn_kernels",
           "other_kernels", "merge_kernels", "launches", "num_layers", "calls_per_layer", "max_abs_err",
           "sm_clock_mhz_before", "sm_clock_mhz_after", "cp_size", "bs", "max_extend_len", "prefix_len", "rank"]


VIEW_COLUMNS = list(CELL_COLUMNS) + [
    "status", "reason", "two_call_us", "fused_us", "speedup", "speedup_ci_low", "speedup_ci_high",
    "gpu_speedup", "host_bound",
    "slowest_rank_two_call", "slowest_rank_fused",
    "imbalance_two_call", "imbalance_fused", "p10_two_call_us", "p90_two_call_us", "p10_fused_us",
    "p90_fused_us", "context_len", "label", "all_ranks", "ranks_measured", "ranks_label"]


_MEMO: dict | None = None  # (function, id(frame)) -> (frame, result), inside one_view() only


@contextmanager
def one_view():
    """Within the block, :func:`prepare` and :func:`cells` run once per frame object (the critical path
    bootstraps a CI per cell: once per report, not once per chart). Frames are read-only here."""
    global _MEMO
    outer = _MEMO
    _MEMO = {} if outer is None else outer
    try:
        yield
    finally:
        _MEMO = outer


def _memo(fn):
    def wrapper(df: pd.DataFrame) -> pd.DataFrame:
        if _MEMO is None:
            return fn(df)
        hit = _MEMO.get((fn.__name__, id(df)))
        if hit is None or hit[0] is not df:
            hit = _MEMO[(fn.__name__, id(df))] = (df, fn(df))  # the frame is kept, so its id stays its own
        return hit[1]
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _lens_text(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (list, tuple, np.ndarray)):
        return ",".join(str(int(x)) for x in v)
    return str(v)


@_memo
def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a results frame with every documented column present and keys normalised.

    Missing columns become NaN (strings: ""), ``extend_lens`` becomes a comma string, ``prefix_len`` NaN
    becomes 0, numeric columns become floats (ints for the key columns); an ``ok`` row without a finite
    positive ``latency_us_median`` becomes ``error`` (never plotted as 0). Never raises on odd input.
    """
    d = df.copy()
    for c in COLUMNS:
        if c not in d.columns:
            d[c] = "" if COLUMNS[c].type == "str" else np.nan
    for c in NUMERIC:
        d[c] = pd.to_numeric(d[c], errors="coerce")
    d["prefix_len"] = d["prefix_len"].fillna(0)
    d["world_size"] = pd.to_numeric(d["world_size"], errors="coerce").fillna(1)
    d["seed"] = pd.to_numeric(d["seed"], errors="coerce").fillna(0)
    d["tp_size"] = pd.to_numeric(d["tp_size"], errors="coerce").fillna(1)
    d["batch"] = pd.to_numeric(d["batch"], errors="coerce").fillna(0)
    for c in ("cp_size", "bs", "max_extend_len", "prefix_len", "rank", "world_size", "seed", "tp_size", "batch"):
        d[c] = d[c].fillna(-1).astype(int)
    d.loc[d["launch"] == "", "launch"] = "simulated"
    d.loc[d["gather"] == "", "gather"] = "none"
    d["extend_lens"] = d["extend_lens"].map(_lens_text)
    for c in ("model", "backend", "dtype", "launch", "gather", "timing", "mode", "status"):
        d[c] = d[c].fillna("").astype(str)
    d["reason"] = d["reason"].fillna("").astype(str)
    d.loc[d["status"] == "", "status"] = Status.ERROR.value
    lat = d["latency_us_median"]
    broken = (d["status"] == Status.OK) & ~(np.isfinite(lat) & (lat > 0))  # "ok" without a usable latency
    d.loc[broken, "status"] = Status.ERROR.value
    d.loc[broken, "reason"] = "status ok but no positive latency recorded"
    d["context_len"] = d["context_len"].fillna(d["max_extend_len"] + d["prefix_len"])
    return d


def uniform(extend_lens: str) -> bool:
    """True when an ``extend_lens`` string lists one length (or nothing): an even batch."""
    vals = {s.strip() for s in str(extend_lens).split(",") if s.strip()}
    return len(vals) <= 1


def line_label(bs: int, prefix_len: int, extend_lens: str) -> str:
    """Legend/table name of a series: ``bs 4``, ``bs 4, prefix 8K``, ``bs 2, extend 11,13``."""
    from cpbench.report.units import human_tokens
    s = f"bs {bs}"
    if prefix_len > 0:
        s += f", prefix {human_tokens(prefix_len)}"
    if not uniform(extend_lens):
        s += f", extend {extend_lens}"
    return s


def groups(df: pd.DataFrame) -> list[tuple[str, str, str, pd.DataFrame]]:
    """Split by (model, backend): ``[(model, backend, file_suffix, rows)]``; the suffix is "" when the
    run has one model and one backend, else ``_<model>_<backend>``. An empty frame gives one empty group."""
    if df.empty:
        return [("", "", "", df)]
    out = []
    keys = list(df.groupby(["model", "backend"], sort=True).groups)
    if len(keys) == 1:  # the frame itself, so that its critical-path view is shared with the report's
        return [(*keys[0], "", df)]
    for model, backend in keys:
        suffix = "" if len(keys) == 1 else f"_{model}_{backend}".replace("/", "-").replace(" ", "-")
        out.append((model, backend, suffix, df[(df["model"] == model) & (df["backend"] == backend)]))
    return out


def pick_timing(df: pd.DataFrame, prefer: str = Timing.EAGER) -> tuple[str, pd.DataFrame]:
    """Rows of one timing mode: ``prefer`` if present, else the first present; ``("", empty)`` if none."""
    present = [t for t in (prefer, Timing.EAGER, Timing.GRAPH) if (df["timing"] == t).any()] if len(df) else []
    present += sorted(set(df["timing"]) - set(present)) if len(df) else []
    if not present:
        return "", df.iloc[0:0]
    return str(present[0]), df[df["timing"] == present[0]]  # plain text, as the column holds it


@_memo
def cells(df: pd.DataFrame) -> pd.DataFrame:
    """Critical-path view of a prepared frame: one row per cell (``results.critical_path`` columns)
    plus ``p10_<tag>_us`` / ``p90_<tag>_us`` of the slowest rank (tag ``two_call``/``fused``),
    ``label`` (series name) and ``context_len``. Latencies in µs; NaN where the cell did not run."""
    if df.empty:
        return pd.DataFrame(columns=VIEW_COLUMNS)
    cp = critical_path(df)
    if cp.empty:  # no two-call or fused row (a run of cp-native alone): no pair to compare
        return pd.DataFrame(columns=VIEW_COLUMNS)
    ok = df[df["status"] == Status.OK]
    keys = list(CELL_COLUMNS)
    for mode, tag in ((m, m.tag) for m in MODES):
        m = ok[ok["mode"] == mode][keys + ["rank", "latency_us_p10", "latency_us_p90"]]
        m = m.drop_duplicates(keys + ["rank"]).rename(columns={
            "rank": f"slowest_rank_{tag}", "latency_us_p10": f"p10_{tag}_us",
            "latency_us_p90": f"p90_{tag}_us"})
        cp = cp.merge(m, on=keys + [f"slowest_rank_{tag}"], how="left")
    ctx = df.groupby(keys, dropna=False)["context_len"].max().rename("context_len").reset_index()
    cp = cp.merge(ctx, on=keys, how="left")
    cp["label"] = [line_label(b, p, s) for b, p, s in zip(cp["bs"], cp["prefix_len"], cp["extend_lens"])]
    return cp.sort_values(["cp_size", "bs", "prefix_len", "max_extend_len", "extend_lens"]).reset_index(drop=True)


def timing_cells(df: pd.DataFrame, timing: str) -> pd.DataFrame:
    """``cells`` of the rows of one timing, read off the whole frame's view (the critical path is computed
    per cell, so this is the same frame without a second computation)."""
    view = cells(df)
    return view[view["timing"] == timing].reset_index(drop=True) if len(view) else view


def ranks_text(a, b) -> str:
    """``"0 / 3"`` for the slowest ranks of two-call / fused; ``—`` for a mode that did not run."""
    f = lambda r: "—" if r is None or (isinstance(r, float) and math.isnan(r)) or int(r) < 0 else str(int(r))
    return f"{f(a)} / {f(b)}"
