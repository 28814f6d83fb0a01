"""The report's Precision section: how many GPU-bound rows reached the sampling target, how wide the
others stayed, and how far the SM clock moved while they were sampled."""

from __future__ import annotations

import math

import pandas as pd

from cpbench.domain.modes import Status
from cpbench.results.critical_path import flags


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def clock_swing(rows: pd.DataFrame) -> pd.Series:
    """Per row, (highest - lowest SM clock read after a timed sample) / highest, a fraction; NaN where the
    clocks were not read (older runs, CPU, NVML unavailable)."""
    lo = pd.to_numeric(rows.get("sm_clock_mhz_min", pd.Series(math.nan, index=rows.index)), errors="coerce")
    hi = pd.to_numeric(rows.get("sm_clock_mhz_max", pd.Series(math.nan, index=rows.index)), errors="coerce")
    sane = (lo > 0) & (hi >= lo) & (hi < 1e6)  # hand-edited or broken values: unknown
    return ((hi - lo) / hi).where(sane)


def precision_numbers(df: pd.DataFrame, manifest: dict, cpu: bool = False) -> dict | None:
    """What the Precision section says, as numbers (fractions of the median), or None when it says nothing
    (a CPU run, a run without ``ci_rel_width`` or GPU time, no ok row that is not host-bound).

    Keys: ``target`` (the manifest's ``config.rel_ci``, None when not set), ``rows`` (ok rows that are not
    host-bound, with a sane width), ``host_bound`` (left out), ``met`` (rows within the target), ``width``
    (median, max) of all rows (no target) or of the rows that missed it, ``swing_missed`` (median, max) and
    ``swing_met`` (median) of the SM clock's swing (NaN when unknown)."""
    nan = math.nan
    if cpu or "ci_rel_width" not in df:
        return None
    ok = df[df["status"] == Status.OK]
    if not pd.to_numeric(ok.get("gpu_busy_us", pd.Series(dtype=float)), errors="coerce").notna().any():
        return None  # no GPU time in any row: a CPU run (its manifest may be gone), or an older run
    host = flags(ok["host_bound"]) if "host_bound" in ok else pd.Series(False, index=ok.index)
    rows = ok[~host]
    width = pd.to_numeric(rows["ci_rel_width"], errors="coerce")
    known = width.notna() & (width >= 0) & (width < 1e6)  # a hand-edited width is left out
    rows, width = rows[known], width[known]
    if rows.empty:
        return None
    target = (manifest.get("config") or {}).get("rel_ci")
    if not (isinstance(target, (int, float)) and not isinstance(target, bool) and 0 < target < 1):
        return dict(target=None, rows=len(rows), host_bound=int(host.sum()), met=0,
                    width=(width.median(), width.max()), swing_missed=(nan, nan), swing_met=nan)
    met = width <= target
    swing = clock_swing(rows)
    missed = swing[~met] if (~met).any() else pd.Series(dtype=float)
    return dict(target=target, rows=len(rows), host_bound=int(host.sum()), met=int(met.sum()),
                width=(width[~met].median(), width[~met].max()) if (~met).any() else (nan, nan),
                swing_missed=(missed.median(), missed.max()) if missed.notna().any() else (nan, nan),
                swing_met=swing[met].median() if met.any() and swing[met].notna().any() else nan)


def precision_section(df: pd.DataFrame, manifest: dict, cpu: bool = False) -> list[str]:
    """Markdown lines of :func:`precision_numbers`: rows that reached ``--rel-ci`` among the ok rows that are
    not host-bound, the interval widths of the others, and the SM clock's swing in both groups."""
    n = precision_numbers(df, manifest, cpu)
    if n is None:
        return []
    if n["target"] is None:
        return ["## Precision", "", f"No `--rel-ci` target was set: every variant used its whole time budget. "
                f"The 95 % intervals of the medians of the {n['rows']} rows that are not host-bound are "
                f"{_pct(n['width'][0])} wide (median; at most {_pct(n['width'][1])}).", ""]
    out = ["## Precision", "",
           f"Each variant was sampled until the 95 % interval of its median was within {_pct(n['target'])} of it, "
           "or its time budget was spent. "
           f"**{n['met']} of {n['rows']}** rows that are not host-bound got there"
           + (f" ({n['host_bound']} host-bound rows left out: their eager latency measures the launching CPU)"
              if n["host_bound"] else "") + "."]
    if n["met"] < n["rows"]:
        out[-1] += (f" The other {n['rows'] - n['met']} stopped at the budget with intervals of {_pct(n['width'][0])} "
                    f"(median) to {_pct(n['width'][1])} of their median.")
        if math.isfinite(n["swing_missed"][0]):
            out[-1] += (f" The SM clock read after each of their samples moved by {_pct(n['swing_missed'][0])} "
                        f"(median; at most {_pct(n['swing_missed'][1])})"
                        + (f", against {_pct(n['swing_met'])} in the rows that met the target"
                           if math.isfinite(n["swing_met"]) else "") + ".")
    return out + [""]
