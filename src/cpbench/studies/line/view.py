"""The line of three points on one kernel family: two-call, fused and cp-native on the critical path.

Each ratio is the critical path's own (results.critical_path: slowest rank per mode, its 95 % bootstrap
interval over the raw samples and passes), taken on the pair of modes it compares: the cp-native rows stand in
for the ``fused`` side (two-call / cp-native; fused / cp-native with the fused rows as the ``two-call`` side). No
torch here.
"""

from __future__ import annotations

import math

import pandas as pd

from cpbench.domain.modes import Mode, Status
from cpbench.results.critical_path import critical_path
from cpbench.results.schema import CELL_COLUMNS

# (column prefix, the mode read as the "two-call" side, the mode read as the "fused" side)
PAIRS = (("fused_vs_two_call", Mode.TWO_CALL, Mode.FUSED),
         ("native_vs_two_call", Mode.TWO_CALL, Mode.CP_NATIVE),
         ("native_vs_fused", Mode.FUSED, Mode.CP_NATIVE))


def line_view(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (CELL_COLUMNS, so per backend) with an ok cp-native row: ``two_call_us``, ``fused_us``,
    ``cp_native_us`` (critical path, µs), and for each of :data:`PAIRS` ``<pair>`` (the first mode's latency
    over the second's: > 1, the second is faster) with ``<pair>_ci_low`` / ``_ci_high``, ``<pair>_status``,
    ``<pair>_gpu`` (the same ratio of GPU busy time) and ``<pair>_host_bound`` (an eager latency the host set);
    ``page_table_<mode>_bytes`` (the largest rank's ``setup_mem_page_table`` + ``setup_mem_swa_page_table``, bytes).
    Empty when no row is cp-native."""
    if df.empty or "mode" not in df or not (df["mode"] == Mode.CP_NATIVE).any():
        return pd.DataFrame()
    keys = [c for c in CELL_COLUMNS if c in df]
    has_native = df[(df["mode"] == Mode.CP_NATIVE) & (df["status"] == Status.OK)][keys].drop_duplicates()
    if has_native.empty:  # cp-native asked for, but every backend recorded it unsupported (or it failed)
        return pd.DataFrame()
    rows = df.merge(has_native, on=keys)
    out = None
    for name, a, b in PAIRS:
        pair = rows[rows["mode"].isin([a, b])].copy()
        pair["mode"] = pair["mode"].map({a: str(Mode.TWO_CALL), b: str(Mode.FUSED)})
        cp = critical_path(pair)
        if cp.empty:
            continue
        cols = {"speedup": name, "speedup_ci_low": f"{name}_ci_low", "speedup_ci_high": f"{name}_ci_high",
                "status": f"{name}_status", "two_call_us": f"{a.tag}_us", "fused_us": f"{b.tag}_us",
                "gpu_speedup": f"{name}_gpu", "host_bound": f"{name}_host_bound"}
        cols = {k: v for k, v in cols.items() if k in cp}
        cp = cp[keys + list(cols)].rename(columns=cols)
        if out is None:
            out = cp
        else:
            cp = cp.drop(columns=[c for c in cp.columns if c in out.columns and c not in keys])
            out = out.merge(cp, on=keys, how="outer")
    if out is None:
        return pd.DataFrame()
    for name, a, b in PAIRS:  # a pair with a mode the run did not measure: its columns say so
        for col, fill in ((name, math.nan), (f"{name}_ci_low", math.nan), (f"{name}_ci_high", math.nan),
                          (f"{name}_status", "not run"), (f"{a.tag}_us", math.nan), (f"{b.tag}_us", math.nan)):
            if col not in out:
                out[col] = fill
    for mode in (Mode.TWO_CALL, Mode.FUSED, Mode.CP_NATIVE):
        sel = rows[rows["mode"] == mode]
        parts = [pd.to_numeric(sel.get(c, pd.Series(math.nan, index=sel.index)), errors="coerce")
                 for c in ("setup_mem_page_table", "setup_mem_swa_page_table")]
        mem = pd.concat(parts, axis=1).sum(axis=1, min_count=1)  # NaN where not measured (a CPU run)
        per_cell = sel.assign(_mem=mem).groupby(keys, dropna=False)["_mem"].max().rename(f"page_table_{mode.tag}_bytes")
        out = out.merge(per_cell.reset_index(), on=keys, how="left")
    return out
