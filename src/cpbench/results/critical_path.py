"""Analysis of a results frame: the critical path of each cell (no torch here).

The columns are defined in :mod:`cpbench.results.schema`; the run directory's files in
:mod:`cpbench.results.store`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cpbench.domain.modes import Mode, MODES, Status, Timing
from cpbench.results.schema import CELL_COLUMNS
from cpbench.results.uncertainty import layer_synced


# the columns the view reads besides the cell's keys
_READ = ("mode", "status", "reason", "rank", "latency_us_median", "critical_us_median", "launch", "cp_size", "timing",
         "samples_us", "pass_sizes", "window_layers_us", "full_layers_us", "gpu_busy_us", "host_bound", "host_hidden",
         "forward_rule")
_NUMERIC = ("rank", "latency_us_median", "critical_us_median", "window_layers_us", "full_layers_us", "gpu_busy_us")


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
    breakable cell issued its forward faster than the GPU ran it), ``forward_rule`` (breakable cells: ``kinds``, the
    forward estimated from one layer of each kind, or ``all``; "" for other timings; absent for runs without it).

    A cell missing a (rank, mode) row (:func:`missing_rows`: a sweep killed between a cell's rows, a torn
    last line) is incomplete: ``status`` ``incomplete``, NaN latencies and speedup (never a critical path
    from the ranks present); ``--resume`` completes it.

    A cell measured on only some of its ``cp_size`` ranks (``--ranks``) has no critical path: its
    ``speedup``, interval and imbalance are NaN, ``two_call_us``/``fused_us`` are the slowest *measured*
    rank's, ``all_ranks`` is False and ``ranks_label`` names the ranks (``"rank 0 only (1 of 4)"``;
    ``"all 4 ranks"`` only when every rank was measured).
    """
    if "mode" in df:  # the pair every speedup compares; cp-native rows have their own view (studies/line/view.py)
        df = df[df["mode"].isin(MODES)]
    if df.empty:
        return pd.DataFrame()
    for col in ("latency_us_median", "reason"):
        if col not in df.columns:  # e.g. a run in which no cell was measured
            df = df.assign(**{col: math.nan if col.startswith("latency") else ""})
    keys = [c for c in CELL_COLUMNS if c in df.columns]
    rows = _Rows.of(df)
    modes = set(rows["mode"])
    codes = df.groupby(keys, dropna=False, sort=True).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")  # each cell's rows, in the frame's order
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    key_values = df[keys].to_numpy(object)
    out = []
    for pos in np.split(order, starts[1:]):
        g = rows.take(pos)
        rec = dict(zip(keys, key_values[pos[0]]))
        bad = np.flatnonzero(g["status"] != Status.OK)
        status, reason = (g["status"][bad[0]], str(g["reason"][bad[0]])) if len(bad) else (Status.OK.value, "")
        lacking = missing_rows(g, modes)
        if lacking:  # a row stands for the missing ones: no latency of this cell is used
            status, reason = "incomplete", incomplete_reason(lacking)
        complete = status == Status.OK
        rank = g.numeric("rank")
        measured = sorted({int(r) for r in rank[~np.isnan(rank)]})
        rec["all_ranks"] = measured == list(range(int(rec.get("cp_size", len(measured)))))
        rec["ranks_measured"] = len(measured)
        rec["ranks_label"] = ranks_label(measured, int(rec.get("cp_size", len(measured))))
        rec["status"], rec["reason"] = status, reason
        for mode, tag in ((m, m.tag) for m in MODES):
            at = np.flatnonzero((g["mode"] == mode.value) & (g["status"] == Status.OK))
            lat = g.numeric("latency_us_median")[at]
            if len(at) and complete and (lat > 0).all():  # an ok row without a positive latency is not usable
                crit = g.numeric("critical_us_median")[at]
                crit = crit[~np.isnan(crit)]
                # torchrun: the per-sample maximum over ranks; simulated: the slowest rank's median
                rec[f"{tag}_us"] = float(crit[0]) if len(crit) else float(lat.max())
                rec[f"slowest_rank_{tag}"] = int(g["rank"][at[np.argmax(lat)]])
                rec[f"imbalance_{tag}"] = (float(lat.max() / lat.min()) if lat.min() > 0 and rec["all_ranks"]
                                           else math.nan)
            else:
                rec[f"{tag}_us"] = math.nan
                rec[f"slowest_rank_{tag}"] = -1
                rec[f"imbalance_{tag}"] = math.nan
        rec["speedup"] = (rec["two_call_us"] / rec["fused_us"]
                          if rec["all_ranks"] and rec["fused_us"] and math.isfinite(rec["fused_us"]) else math.nan)
        shares = kind_shares(g) if rec["all_ranks"] and complete else None
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
        if "forward_rule" in g:  # breakable rows: one layer per kind ("kinds") or every layer ("all")
            rec["forward_rule"] = next((str(x) for x in g["forward_rule"] if isinstance(x, str) and x), "")
        out.append(rec)
    return pd.DataFrame(out)


class _Rows:
    """One cell's rows as numpy arrays by column: taking a cell's rows of a wide frame copies every column,
    a cost paid once here instead of once per cell and question. Text columns are object arrays; numeric
    ones are read as float (NaN where a value is not a number) by :meth:`numeric`, converted once."""

    def __init__(self, cols: dict, numeric: dict) -> None:
        self.cols, self._numeric = cols, numeric

    @classmethod
    def of(cls, df: pd.DataFrame) -> "_Rows":
        cols = {c: df[c].to_numpy(object) for c in _READ if c in df.columns}
        numeric = {c: pd.to_numeric(df[c], errors="coerce").to_numpy(float) for c in _NUMERIC if c in df.columns}
        return cls(cols, numeric)

    def take(self, pos: np.ndarray) -> "_Rows":
        return _Rows({c: v[pos] for c, v in self.cols.items()}, {c: v[pos] for c, v in self._numeric.items()})

    def numeric(self, col: str) -> np.ndarray:
        """``col`` as floats (NaN for a missing column or a value that is not a number)."""
        v = self._numeric.get(col)
        return v if v is not None else np.full(len(self), math.nan)

    def __contains__(self, col: str) -> bool:
        return col in self.cols

    def __getitem__(self, col: str) -> np.ndarray:
        return self.cols[col]

    def __len__(self) -> int:
        return len(self.cols["mode"])


def missing_rows(g, modes) -> list[tuple[int, str]]:
    """The (rank, mode) rows one cell's rows ``g`` (a DataFrame, or anything indexed by column) lack: every mode of
    ``modes`` (the run's) on every rank the cell has a row of, and on a torchrun launch (which always measures every
    rank) every rank of ``cp_size``. Sorted by rank, then mode."""
    have = {(int(r), str(m)) for r, m in zip(pd.to_numeric(g["rank"], errors="coerce"), g["mode"]) if r == r}
    ranks = {r for r, _ in have}
    if "launch" in g and (g["launch"] == "torchrun").all() and "cp_size" in g:
        ranks |= set(range(int(np.asarray(g["cp_size"])[0])))
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


def _speedup_ci(g: _Rows, shares: dict | None = None) -> tuple[float, float]:
    """The speedup interval of one cell's ok rows (each rank's raw samples, by mode); with ``shares``
    (:func:`kind_shares`) on the layer-synchronised critical path."""
    from cpbench.results.uncertainty import speedup_ci

    if "samples_us" not in g:
        return math.nan, math.nan
    ok = _ok_by_rank(g)
    per_mode = [[s for s in g["samples_us"][at] if s is not None and hasattr(s, "__len__")] for at in ok]
    torchrun = "launch" in g and (g["launch"][np.concatenate(ok)] == "torchrun").all()
    if shares is not None and any(len(p) != len(shares[m][0]) for p, m in zip(per_mode, MODES)):
        return math.nan, math.nan
    if not torchrun and "pass_sizes" in g and all(hasattr(x, "__len__") and len(x) > 1
                                                  for at in ok for x in g["pass_sizes"][at]):
        from cpbench.results.uncertainty import speedup_ci_over_passes

        sizes = [list(g["pass_sizes"][at]) for at in ok]
        return speedup_ci_over_passes(*per_mode, *sizes,
                                      shares=(shares[Mode.TWO_CALL][0], shares[Mode.FUSED][0]) if shares is not None else None)
    return speedup_ci(*per_mode, per_sample_max=bool(torchrun),
                      shares=(shares[Mode.TWO_CALL][0], shares[Mode.FUSED][0]) if shares is not None else None)


def _ok_by_rank(g: _Rows) -> list[np.ndarray]:
    """Per mode of MODES, the positions of its ``ok`` rows in rank order."""
    ok = g["status"] == Status.OK
    rank = g.numeric("rank")
    per_mode = (np.flatnonzero(ok & (g["mode"] == m.value)) for m in MODES)
    return [at[np.argsort(rank[at], kind="stable")] for at in per_mode]


def kind_shares(g: _Rows) -> dict | None:
    """Per mode, ``(shares [ranks, 2], medians [ranks])``: each rank's fraction of its forward in the window
    layers and in the full layers (``window_layers_us``, ``full_layers_us``) and its median forward (µs), ranks
    in order; None when the cell's rows cannot give them (a torchrun launch, whose ranks synchronise and are
    measured together; a model with one layer kind; a timing other than breakable: only there is the split
    timed in the same mode as the forward. Eager's split is the GPU busy time of a profiled forward, which says
    nothing of a host-bound eager forward's wall time, and graph timing has none)."""
    if "window_layers_us" not in g or "full_layers_us" not in g or (
            "launch" in g and (g["launch"] == "torchrun").any()) or not (g["timing"] == Timing.BREAKABLE).all():
        return None
    out = {}
    for mode, at in zip(MODES, _ok_by_rank(g)):
        kinds = np.stack([g.numeric("window_layers_us")[at], g.numeric("full_layers_us")[at]], axis=1)
        med = g.numeric("latency_us_median")[at]
        if not len(at) or not np.isfinite(kinds).all() or (kinds <= 0).any() or not (med > 0).all():
            return None
        out[mode] = (kinds / kinds.sum(axis=1, keepdims=True), med)
    return out


def _gpu_time(g: _Rows) -> dict:
    """GPU busy time per mode on the busiest rank, its ratio, and whether the cell is host-bound."""
    out = {"gpu_busy_two_call_us": math.nan, "gpu_busy_fused_us": math.nan, "gpu_speedup": math.nan,
           "host_bound": any(map(flag, g["host_bound"])) if "host_bound" in g else False,
           "host_hidden": all(map(flag, g["host_hidden"])) if "host_hidden" in g and len(g) else False}
    if "gpu_busy_us" not in g:
        return out
    for mode, tag in ((m, m.tag) for m in MODES):
        busy = g.numeric("gpu_busy_us")[(g["mode"] == mode.value) & (g["status"] == Status.OK)]
        if (~np.isnan(busy)).any():
            out[f"gpu_busy_{tag}_us"] = float(np.nanmax(busy))
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
