"""Compare the fused-vs-two-call speedups of two runs, cell by cell, on the critical path.

Each run's cells come from :func:`cpbench.results.critical_path.critical_path`: ``speedup = two-call / fused``
on the critical path with its 95 % bootstrap interval (``speedup_ci_low/high``,
:mod:`cpbench.results.uncertainty`). Each speedup gets a verdict by the one tie rule of
:mod:`cpbench.results.verdicts` (faster when the interval lies above 1, slower when below, a tie when it
contains 1); the two runs *agree* on a cell when both verdicts are the same. Beside it, *overlap*: the
two intervals share a value, so neither run contradicts the other (a tie in one run and "slower" just
below 1 in the other overlap; opposite verdicts never do). A cell without a verdict in either run (did
not run, no usable speedup) is listed but not counted. A cell host-bound in either run (its eager
speedup measures the launching CPU, ``critical_path``'s ``host_bound``) is counted, and the agreement
among the other cells is given beside it. No torch.
"""

from __future__ import annotations

import math

import pandas as pd

from cpbench.domain.modes import Status
from cpbench.results.critical_path import critical_path, flags
from cpbench.results.keys import canon, numeric_first
from cpbench.results.schema import CELL_COLUMNS
from cpbench.results.verdicts import NO_VERDICT, speedup_verdict

SIDE_COLUMNS = ("speedup", "ci_low", "ci_high", "verdict", "status", "host_bound")
COLUMNS = (list(CELL_COLUMNS) + [f"{side}_{c}" for side in ("base", "new") for c in SIDE_COLUMNS]
           + ["agree", "overlap"])


def _side(df: pd.DataFrame) -> pd.DataFrame:
    view = critical_path(df)
    if view.empty:
        return pd.DataFrame(columns=list(CELL_COLUMNS) + ["_key", *SIDE_COLUMNS])
    for c in CELL_COLUMNS:
        if c not in view.columns:
            view[c] = None
    out = view[list(CELL_COLUMNS)].copy()
    out["_key"] = ["\x1f".join(t) for t in zip(*[view[c].map(canon) for c in CELL_COLUMNS])]
    out["speedup"] = pd.to_numeric(view["speedup"], errors="coerce")
    out["ci_low"] = pd.to_numeric(view["speedup_ci_low"], errors="coerce")
    out["ci_high"] = pd.to_numeric(view["speedup_ci_high"], errors="coerce")
    out["status"] = view["status"].astype(str)
    out["host_bound"] = flags(view["host_bound"]) if "host_bound" in view else False
    out["verdict"] = [speedup_verdict(s, lo, hi) if st == Status.OK else NO_VERDICT
                      for s, lo, hi, st in zip(out["speedup"], out["ci_low"], out["ci_high"], out["status"])]
    return out.drop_duplicates("_key", keep="last")


def speedup_frame(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per cell present in both runs: ``base_speedup, base_ci_low, base_ci_high, base_verdict,
    base_status, base_host_bound`` and the same for ``new_``, and ``agree`` (True / False, or None when
    either run has no verdict for the cell). Speedups are ratios (two-call µs / fused µs); cells sorted by key."""
    b, n = _side(base), _side(new)
    if b.empty or n.empty:
        return pd.DataFrame(columns=COLUMNS)
    m = b.merge(n.drop(columns=list(CELL_COLUMNS)), on="_key", suffixes=("_b", "_n"))
    m = m.sort_values(list(CELL_COLUMNS), key=numeric_first, kind="stable")
    out = m[list(CELL_COLUMNS)].copy()
    for side, suf in (("base", "_b"), ("new", "_n")):
        for c in SIDE_COLUMNS:
            out[f"{side}_{c}"] = m[c + suf].to_numpy()
    out["agree"] = [None if NO_VERDICT in (x, y) else bool(x == y)
                    for x, y in zip(out["base_verdict"], out["new_verdict"])]
    out["overlap"] = [None if a is None else _overlap(bl, bh, nl, nh)
                      for a, bl, bh, nl, nh in zip(out["agree"], out["base_ci_low"], out["base_ci_high"],
                                                   out["new_ci_low"], out["new_ci_high"])]
    return out.reset_index(drop=True)[COLUMNS]


def _overlap(base_low: float, base_high: float, new_low: float, new_high: float) -> bool | None:
    """Whether two intervals share a value; None when either is missing (no raw samples)."""
    ends = (base_low, base_high, new_low, new_high)
    if any(not isinstance(x, (int, float)) or not math.isfinite(x) for x in ends):
        return None
    return bool(max(base_low, new_low) <= min(base_high, new_high))


def agreement(frame: pd.DataFrame, gpu_bound_only: bool = False) -> tuple[int, int]:
    """``(K, N)``: cells whose verdicts agree, of the cells with a verdict in both runs (with
    ``gpu_bound_only``: of those host-bound in neither run)."""
    if frame is None or frame.empty:
        return 0, 0
    if gpu_bound_only and "base_host_bound" in frame:
        frame = frame[~(frame["base_host_bound"].astype(bool) | frame["new_host_bound"].astype(bool))]
    judged = [a for a in frame["agree"] if a is not None and not (isinstance(a, float) and math.isnan(a))]
    return sum(bool(a) for a in judged), len(judged)


def overlaps(frame: pd.DataFrame) -> tuple[int, int]:
    """``(K, N)``: cells whose two intervals overlap, of the cells with an interval in both runs."""
    if frame is None or frame.empty or "overlap" not in frame:
        return 0, 0
    judged = [a for a in frame["overlap"] if a is not None and not (isinstance(a, float) and math.isnan(a))]
    return sum(bool(a) for a in judged), len(judged)


def inside(frame: pd.DataFrame) -> tuple[int, int]:
    """``(K, N)``: cells whose new speedup lies inside the base run's 95 % interval, of the cells with both (how
    well one run's interval predicts the next: run-to-run coverage)."""
    if frame is None or frame.empty:
        return 0, 0
    vals = [(p, lo, hi) for p, lo, hi in zip(frame["new_speedup"], frame["base_ci_low"], frame["base_ci_high"])
            if all(isinstance(x, (int, float)) and math.isfinite(x) for x in (p, lo, hi))]
    return sum(lo <= p <= hi for p, lo, hi in vals), len(vals)


def agreement_line(frame: pd.DataFrame) -> str:
    """``verdicts agree in K of N cells (P %; K' of N' not host-bound); the intervals overlap in J of M; the new
    speedup lies inside the base interval in I of T (Q %)`` (the part in brackets only when some cell is
    host-bound); ``no cell has a speedup verdict in both runs`` when N = 0."""
    k, n = agreement(frame)
    if not n:
        return "no cell has a speedup verdict in both runs"
    j, m = overlaps(frame)
    kg, ng = agreement(frame, gpu_bound_only=True)
    gpu = "; every cell host-bound" if not ng else f"; {kg} of {ng} not host-bound" if ng < n else ""
    i, t = inside(frame)
    return (f"verdicts agree in {k} of {n} cells ({100.0 * k / n:.0f} %{gpu})"
            + (f"; the two intervals overlap in {j} of {m}" if m else "")
            + (f"; the new speedup lies inside the base interval in {i} of {t} ({100.0 * i / t:.0f} %)" if t else ""))
