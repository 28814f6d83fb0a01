"""The report's Precision section: how many GPU-bound rows reached the sampling target, how wide the
others stayed, and how far the SM clock moved while they were sampled."""

from __future__ import annotations

import math

import pandas as pd

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


def precision_section(df: pd.DataFrame, manifest: dict, cpu: bool = False) -> list[str]:
    """Markdown lines: rows that reached ``--rel-ci`` (the manifest's ``config.rel_ci``) among the ok rows
    that are not host-bound, the interval widths of the others, and the SM clock's swing in both groups.
    Empty for a CPU run (a functional check) or a run without ``ci_rel_width``."""
    if cpu or "ci_rel_width" not in df:
        return []
    ok = df[df["status"] == "ok"]
    if not pd.to_numeric(ok.get("gpu_busy_us", pd.Series(dtype=float)), errors="coerce").notna().any():
        return []  # no GPU time in any row: a CPU run (its manifest may be gone), or an older run
    host = flags(ok["host_bound"]) if "host_bound" in ok else pd.Series(False, index=ok.index)
    rows = ok[~host]
    width = pd.to_numeric(rows["ci_rel_width"], errors="coerce")
    known = width.notna() & (width >= 0) & (width < 1e6)  # a hand-edited width is left out
    rows, width = rows[known], width[known]
    if rows.empty:
        return []
    target = (manifest.get("config") or {}).get("rel_ci")
    if not (isinstance(target, (int, float)) and not isinstance(target, bool) and 0 < target < 1):
        return ["## Precision", "", f"No `--rel-ci` target was set: every variant used its whole time budget. "
                f"The 95 % intervals of the medians of the {len(rows)} rows that are not host-bound are "
                f"{_pct(width.median())} wide (median; at most {_pct(width.max())}).", ""]
    met = width <= target
    out = ["## Precision", "",
           f"Each variant was sampled until the 95 % interval of its median was within {_pct(target)} of it, "
           "or its time budget was spent. "
           f"**{int(met.sum())} of {len(rows)}** rows that are not host-bound got there"
           + (f" ({int(host.sum())} host-bound rows left out: their eager latency measures the launching CPU)"
              if host.any() else "") + "."]
    if (~met).any():
        w = width[~met]
        out[-1] += (f" The other {int((~met).sum())} stopped at the budget with intervals of {_pct(w.median())} "
                    f"(median) to {_pct(w.max())} of their median.")
        swing = clock_swing(rows)
        if swing[~met].notna().any():
            out[-1] += (f" The SM clock read after each of their samples moved by {_pct(swing[~met].median())} "
                        f"(median; at most {_pct(swing[~met].max())})"
                        + (f", against {_pct(swing[met].median())} in the rows that met the target"
                           if met.any() and swing[met].notna().any() else "") + ".")
    return out + [""]
