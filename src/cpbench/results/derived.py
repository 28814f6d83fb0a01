"""Columns derived when a run is read, never stored (asv's rule: store what was measured, derive the rest).

A row on disk holds measurements (latencies, samples, FLOPs, clocks, GPU busy time, bytes); every column
here is a function of those, of the other ranks' rows of the same cell, or of the manifest. Computing them
on read means one formula per column, a formula fixed later applies to every run, and an older run (which
stored some of them) reads the same as a new one: a value is recomputed wherever its inputs are present
and the stored value is kept only where they are not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cpbench.domain.modes import Mode, Status, Timing
from cpbench.results.schema import CELL_COLUMNS, DERIVED_COLUMNS
from cpbench.results.uncertainty import critical_per_sample
from cpbench.domain.ring import bus_bandwidth_gbps

from cpbench.results.policy import CLOCK_DROP_RATIO, HOST_BOUND_RATIO  # (results/policy.py says why)

__all__ = ["CLOCK_DROP_RATIO", "DERIVED_COLUMNS", "HOST_BOUND_RATIO", "derive"]  # DERIVED_COLUMNS: schema's


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    """Column ``col`` as floats (NaN where absent or not a number)."""
    if col not in df:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce").astype(float)


def _keep_stored(df: pd.DataFrame, col: str, new: pd.Series, known: pd.Series) -> pd.Series:
    """``new`` where its inputs are ``known``, else what the row stored (an older run's value)."""
    if col not in df:
        return new.where(known)
    return new.where(known, df[col])


def derive(df: pd.DataFrame, manifest: dict | None = None) -> pd.DataFrame:
    """A results frame with every :data:`DERIVED_COLUMNS` column computed (a new frame; ``df`` unchanged).

    Per row (µs, FLOP, bytes as stored):

    * ``per_layer_us = latency_us_median / num_layers``; ``tflops = flops / latency_us_median`` (TFLOP/s).
    * ``gemm_peak_tflops``: the manifest's ``gemm_peak.gemm_tflops`` on ``ok`` rows (measure/peak.py).
    * ``page_table_dup_bytes = 2 * page_table_bytes`` on fused rows at cp_size > 1, else 0 (the fused call's
      ``cat(t, t)`` of every table, SGLang PR #33137).
    * ``clock_drop``: ``sm_clock_mhz_after < CLOCK_DROP_RATIO * sm_clock_mhz_before``.
    * ``host_bound``: an eager row with ``latency_us_median > 1.2 * gpu_busy_us``.
    * ``host_hidden``: a breakable row whose median host issue time ``host_launch_us`` is below its median
      forward ``latency_us_median`` (the host ran ahead; otherwise the forward waited for the host).

    Per cell of a torchrun launch (the ``ok``/``mismatch`` rows of one cell, mode and timing, over ranks):

    * ``critical_us_median``: median over samples of the per-sample maximum over ranks (ranks run the same
      agreed sample sequence, so sample i of every rank is the same forward).
    * ``wait_us = gather_us - min(gather_us)``: this rank's time waiting in the all-gather for slower ranks.
    * ``bus_gbps``: ring all-gather bus bandwidth ``(n-1)/n * gather_bytes * num_layers / min(gather_us)``
      (spec.ring, nccl-tests' convention).

    ``manifest``: the run's manifest (for the GEMM peak); None or {} keeps stored peaks.
    """
    out = df.copy()
    if out.empty:
        return out
    med, layers, flops = _num(out, "latency_us_median"), _num(out, "num_layers"), _num(out, "flops")
    has_med = med.notna() & (med > 0)
    out["per_layer_us"] = _keep_stored(out, "per_layer_us", med / layers, has_med & (layers > 0))
    out["tflops"] = _keep_stored(out, "tflops", flops / (med * 1e-6) / 1e12, has_med & flops.notna())
    peak = (manifest or {}).get("gemm_peak")
    peak = peak.get("gemm_tflops") if isinstance(peak, dict) else None
    ok = out["status"].eq(Status.OK) if "status" in out else pd.Series(False, index=out.index)
    if isinstance(peak, (int, float)) and not isinstance(peak, bool):
        out["gemm_peak_tflops"] = pd.Series(float(peak), index=out.index).where(ok)
    elif "gemm_peak_tflops" not in out:
        out["gemm_peak_tflops"] = np.nan
    table = _num(out, "page_table_bytes")
    fused = out.get("mode", pd.Series("", index=out.index)).eq(Mode.FUSED) & (_num(out, "cp_size") > 1)
    out["page_table_dup_bytes"] = _keep_stored(out, "page_table_dup_bytes", (2 * table).where(fused, 0.0),
                                               table.notna())
    before, after = _num(out, "sm_clock_mhz_before"), _num(out, "sm_clock_mhz_after")
    out["clock_drop"] = ((before > 0) & (after < CLOCK_DROP_RATIO * before)).astype(bool)
    busy = _num(out, "gpu_busy_us")
    eager = out.get("timing", pd.Series("", index=out.index)).eq(Timing.EAGER)
    out["host_bound"] = (eager & (busy > 0) & (med > HOST_BOUND_RATIO * busy)).astype(bool)
    host = _num(out, "host_launch_us")
    breakable = out.get("timing", pd.Series("", index=out.index)).eq(Timing.BREAKABLE)
    out["host_hidden"] = (breakable & has_med & (host < med)).astype(bool)
    return _derive_torchrun_cells(out)


def _derive_torchrun_cells(out: pd.DataFrame) -> pd.DataFrame:
    """Fill ``critical_us_median``, ``wait_us`` and ``bus_gbps`` on the measured rows of torchrun cells."""
    for col in ("critical_us_median", "wait_us", "bus_gbps"):
        if col not in out:
            out[col] = np.nan
    if "launch" not in out or "status" not in out:
        return out
    dist = out[out["launch"].eq("torchrun") & out["status"].isin([Status.OK, Status.MISMATCH])]
    keys = [c for c in (*CELL_COLUMNS, "mode") if c in dist]
    if dist.empty or not keys:
        return out
    for _, members in dist.groupby(keys, sort=False, dropna=False):
        crit = critical_per_sample(list(members["samples_us"])) if "samples_us" in members else None
        if crit is not None:
            out.loc[members.index, "critical_us_median"] = float(np.median(crit))
        gathers = _num(members, "gather_us")
        if len(members) and gathers.notna().all():
            fastest = float(gathers.min())
            out.loc[members.index, "wait_us"] = gathers - fastest
            nbytes = _num(members, "gather_bytes") * _num(members, "num_layers")
            if fastest > 0:
                for i, n, cp in zip(members.index, nbytes, _num(members, "cp_size")):
                    if n > 0:
                        out.loc[i, "bus_gbps"] = bus_bandwidth_gbps(n, int(cp), fastest)
    return out
