"""Analysis of a results frame: the critical path of each cell (no torch here).

The columns are defined in :mod:`cpbench.results.schema`; the run directory's files in
:mod:`cpbench.results.store`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cpbench.domain.modes import Mode, MODES
from cpbench.results.schema import CELL_COLUMNS
from cpbench.results.uncertainty import layer_synced


def critical_path(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell (the schema's CELL_COLUMNS): the critical path per mode (torchrun: the median of the
    per-sample maximum over ranks, ``critical_us_median``; simulated: the slowest rank's median, or for breakable
    rows of a model with window and full layers (:func:`kind_shares`) the layer-synchronised path: ranks wait for each other at every layer's K|V all-gather, so the forward takes
    ``sum over layer kinds of max over ranks`` (:func:`cpbench.results.uncertainty.layer_synced`)),
    ``speedup = two_call_us / fused_us`` on it, and rank imbalance max/min. ``two_call_max_us, fused_max_us,
    speedup_max`` keep the whole-forward maximum over ranks; ``critical_rule`` names the rule the headline used.

    A cell whose rows are not all ``ok`` gets ``status`` = the first non-ok status and NaN latencies.
    Columns: ``two_call_us, fused_us, speedup, speedup_ci_low, speedup_ci_high`` (95 % bootstrap
    interval, :mod:`cpbench.results.uncertainty`; NaN without raw samples), ``slowest_rank_two_call,
    slowest_rank_fused, imbalance_two_call, imbalance_fused, status, reason``, and from the profiled
    eager forwards ``gpu_busy_two_call_us, gpu_busy_fused_us`` (slowest rank's GPU busy time),
    ``gpu_speedup`` (their ratio), ``host_bound`` (any row of the cell is) and ``host_hidden`` (every row of a
    breakable cell issued its forward faster than the GPU ran it).

    A cell missing a (rank, mode) row (:func:`missing_rows`: a sweep killed between a cell's rows, a torn
    last line) is incomplete: ``status`` ``incomplete``, NaN latencies and speedup (never a critical path
    from the ranks present); ``--resume`` completes it.

    A cell measured on only some of its ``cp_size`` ranks (``--ranks``) has no critical path: its
    ``speedup``, interval and imbalance are NaN, ``two_call_us``/``fused_us`` are the slowest *measured*
    rank's, ``all_ranks`` is False and ``ranks_label`` names the ranks (``"rank 0 only (1 of 4)"``;
    ``"all 4 ranks"`` only when every rank was measured).
    """
    if "mode" in df:  # the pair every speedup compares; cp-native rows have their own view (results/line.py)
        df = df[df["mode"].isin(MODES)]
    if df.empty:
        return pd.DataFrame()
    for col in ("latency_us_median", "reason"):
        if col not in df.columns:  # e.g. a run in which no cell was measured
            df = df.assign(**{col: math.nan if col.startswith("latency") else ""})
    keys = [c for c in CELL_COLUMNS if c in df.columns]
    modes = set(df["mode"])
    out = []
    for cell, g in df.groupby(keys, dropna=False, sort=True):
        rec = dict(zip(keys, cell if isinstance(cell, tuple) else (cell,)))
        bad = g[g["status"] != "ok"]
        lacking = missing_rows(g, modes)
        if lacking:  # a row stands for the missing ones: no latency of this cell is used
            bad = pd.DataFrame({"status": ["incomplete"], "reason": [incomplete_reason(lacking)]})
        measured = sorted({int(r) for r in pd.to_numeric(g["rank"], errors="coerce").dropna()})
        rec["all_ranks"] = measured == list(range(int(rec.get("cp_size", len(measured)))))
        rec["ranks_measured"] = len(measured)
        rec["ranks_label"] = ranks_label(measured, int(rec.get("cp_size", len(measured))))
        rec["status"] = bad["status"].iloc[0] if len(bad) else "ok"
        rec["reason"] = str(bad["reason"].iloc[0]) if len(bad) else ""
        for mode, tag in ((m, m.tag) for m in MODES):
            m = g[(g["mode"] == mode) & (g["status"] == "ok")]
            lat = pd.to_numeric(m["latency_us_median"], errors="coerce")
            if len(m) and not (lat > 0).all():  # an ok row without a positive latency is not usable
                m, lat = m.iloc[0:0], lat.iloc[0:0]
            if len(m) and not len(bad):
                i = lat.idxmax()
                crit = pd.to_numeric(m.get("critical_us_median", pd.Series(dtype=float)), errors="coerce").dropna()
                # torchrun: the per-sample maximum over ranks; simulated: the slowest rank's median
                rec[f"{tag}_us"] = float(crit.iloc[0]) if len(crit) else float(lat.max())
                rec[f"slowest_rank_{tag}"] = int(m.loc[i, "rank"])
                rec[f"imbalance_{tag}"] = (float(lat.max() / lat.min()) if lat.min() > 0 and rec["all_ranks"]
                                           else math.nan)
            else:
                rec[f"{tag}_us"] = math.nan
                rec[f"slowest_rank_{tag}"] = -1
                rec[f"imbalance_{tag}"] = math.nan
        rec["speedup"] = (rec["two_call_us"] / rec["fused_us"]
                          if rec["all_ranks"] and rec["fused_us"] and math.isfinite(rec["fused_us"]) else math.nan)
        shares = kind_shares(g) if rec["all_ranks"] and not len(bad) else None
        rec["two_call_max_us"], rec["fused_max_us"], rec["speedup_max"] = (
            rec["two_call_us"], rec["fused_us"], rec["speedup"])
        rec["critical_rule"] = "max over ranks of the forward"
        if shares is not None:  # ranks wait for each other every layer: sum over layer kinds of the slowest rank
            for tag, mode in ((m.tag, m) for m in MODES):
                rec[f"{tag}_us"] = float(layer_synced(shares[mode][1], shares[mode][0]))
            rec["speedup"] = rec["two_call_us"] / rec["fused_us"]
            rec["critical_rule"] = "sum over layer kinds of the slowest rank"
        rec["speedup_ci_low"], rec["speedup_ci_high"] = _speedup_ci(g, shares) if math.isfinite(rec["speedup"]) else (
            math.nan, math.nan)
        rec.update(_gpu_time(g))
        out.append(rec)
    return pd.DataFrame(out)


def missing_rows(g: pd.DataFrame, modes) -> list[tuple[int, str]]:
    """The (rank, mode) rows one cell's rows ``g`` lack: every mode of ``modes`` (the run's) on every rank
    the cell has a row of, and on a torchrun launch (which always measures every rank) every rank of
    ``cp_size``. Sorted by rank, then mode."""
    have = {(int(r), str(m)) for r, m in zip(pd.to_numeric(g["rank"], errors="coerce"), g["mode"]) if r == r}
    ranks = {r for r, _ in have}
    if "launch" in g and (g["launch"] == "torchrun").all() and "cp_size" in g:
        ranks |= set(range(int(g["cp_size"].iloc[0])))
    order = {m: i for i, m in enumerate(MODES)}
    return sorted(((r, m) for r in ranks for m in modes if (r, m) not in have),
                  key=lambda x: (x[0], order.get(x[1], 9), x[1]))


def incomplete_reason(lacking: list[tuple[int, str]]) -> str:
    """``"no row for rank 1 fused: rerun the sweep with --resume to complete the cell"``."""
    what = ", ".join(f"rank {r} {m}" for r, m in lacking[:4]) + (" ..." if len(lacking) > 4 else "")
    return f"no row for {what}: rerun the sweep with --resume to complete the cell"


def ranks_label(ranks, cp_size: int) -> str:
    """Which of a cell's ``cp_size`` ranks were measured: ``"all 4 ranks"``, ``"rank 0 only (1 of 4)"``,
    ``"ranks 0, 3 (2 of 4)"``, ``"ranks 0–2 (3 of 4)"``."""
    ranks = sorted({int(r) for r in ranks})
    if ranks == list(range(cp_size)):
        return f"all {cp_size} rank{'s' if cp_size != 1 else ''}"
    if len(ranks) == 1:
        return f"rank {ranks[0]} only (1 of {cp_size})"
    return f"ranks {span_text(ranks)} ({len(ranks)} of {cp_size})"


def span_text(ints) -> str:
    """[0, 1, 2, 3, 5] -> '0–3, 5'; [0, 3] -> '0, 3'."""
    vals, out = sorted(set(int(i) for i in ints)), []
    for v in vals:
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return ", ".join(str(a) if a == b else (f"{a}, {b}" if b == a + 1 else f"{a}–{b}") for a, b in out)


def _speedup_ci(g: pd.DataFrame, shares: dict | None = None) -> tuple[float, float]:
    """The speedup interval of one cell's ok rows (each rank's raw samples, by mode); with ``shares``
    (:func:`kind_shares`) on the layer-synchronised critical path."""
    from cpbench.results.uncertainty import speedup_ci

    if "samples_us" not in g:
        return math.nan, math.nan
    ok = g[g["status"] == "ok"].sort_values("rank")
    per_mode = [[s for s in ok.loc[ok["mode"] == m, "samples_us"] if s is not None and hasattr(s, "__len__")]
                for m in MODES]
    torchrun = "launch" in ok and (ok["launch"] == "torchrun").all()
    if shares is not None and any(len(p) != len(shares[m][0]) for p, m in zip(per_mode, MODES)):
        return math.nan, math.nan
    if not torchrun and "pass_sizes" in ok and ok["pass_sizes"].map(lambda x: hasattr(x, "__len__") and len(x) > 1).all():
        from cpbench.results.uncertainty import speedup_ci_over_passes

        sizes = [list(ok.loc[ok["mode"] == m, "pass_sizes"]) for m in MODES]
        return speedup_ci_over_passes(*per_mode, *sizes,
                                      shares=(shares[Mode.TWO_CALL][0], shares[Mode.FUSED][0]) if shares is not None else None)
    return speedup_ci(*per_mode, per_sample_max=bool(torchrun),
                      shares=(shares[Mode.TWO_CALL][0], shares[Mode.FUSED][0]) if shares is not None else None)


def kind_shares(g: pd.DataFrame) -> dict | None:
    """Per mode, ``(shares [ranks, 2], medians [ranks])``: each rank's fraction of its forward in the window
    layers and in the full layers (``window_layers_us``, ``full_layers_us``) and its median forward (µs), ranks
    in order; None when the cell's rows cannot give them (a torchrun launch, whose ranks synchronise and are
    measured together; a model with one layer kind; a timing other than breakable: only there is the split
    timed in the same mode as the forward. Eager's split is the GPU busy time of a profiled forward, which says
    nothing of a host-bound eager forward's wall time, and graph timing has none)."""
    if "window_layers_us" not in g or "full_layers_us" not in g or (
            "launch" in g and (g["launch"] == "torchrun").any()) or not (g["timing"] == "breakable").all():
        return None
    out = {}
    for mode in MODES:
        m = g[(g["mode"] == mode) & (g["status"] == "ok")].sort_values("rank")
        kinds = m[["window_layers_us", "full_layers_us"]].apply(pd.to_numeric, errors="coerce").to_numpy(float)
        med = pd.to_numeric(m["latency_us_median"], errors="coerce").to_numpy(float)
        if not len(m) or not np.isfinite(kinds).all() or (kinds <= 0).any() or not (med > 0).all():
            return None
        out[mode] = (kinds / kinds.sum(axis=1, keepdims=True), med)
    return out


def _gpu_time(g: pd.DataFrame) -> dict:
    """GPU busy time per mode on the busiest rank, its ratio, and whether the cell is host-bound."""
    out = {"gpu_busy_two_call_us": math.nan, "gpu_busy_fused_us": math.nan, "gpu_speedup": math.nan,
           "host_bound": bool(flags(g["host_bound"]).any()) if "host_bound" in g else False,
           "host_hidden": bool(flags(g["host_hidden"]).all()) if "host_hidden" in g and len(g) else False}
    if "gpu_busy_us" not in g:
        return out
    for mode, tag in ((m, m.tag) for m in MODES):
        busy = pd.to_numeric(g.loc[(g["mode"] == mode) & (g["status"] == "ok"), "gpu_busy_us"], errors="coerce")
        if busy.notna().any():
            out[f"gpu_busy_{tag}_us"] = float(busy.max())
    if out["gpu_busy_fused_us"] > 0:
        out["gpu_speedup"] = out["gpu_busy_two_call_us"] / out["gpu_busy_fused_us"]
    return out


def flag(value) -> bool:
    """One boolean read back from parquet/JSON (``host_bound``, ``clock_drop``: bool, 0/1, NaN or None for a
    row that lacks it) as True/False, a missing value False. The one parser of such columns."""
    return isinstance(value, (bool, int, float, np.bool_)) and bool(value == 1)


def flags(values: pd.Series) -> pd.Series:
    """:func:`flag` over a column."""
    return values.map(flag)
