"""Shape torchrun rows (one process per CP rank) for the distributed charts and report sections
(pandas only; no matplotlib, no torch).

Phase columns (``gather_us``, ``kv_write_us``, ``attn_us``, ``wait_us``; sums over layers, µs) exist on
eager torchrun rows only. ``wait_us`` is part of ``gather_us`` (the time beyond the fastest rank's
gather), so a rank's stack is attention + KV write + (gather - wait) + wait = gather + kv_write + attn.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from cpbench.domain.modes import MODES, Status, Timing
from cpbench.results.uncertainty import critical_per_sample
from cpbench.report.data import cells
from cpbench.domain.ring import ring_time_us

PHASES = ("gather_us", "kv_write_us", "attn_us", "wait_us")
CELL = ["model", "backend", "dtype", "timing", "cp_size", "bs", "max_extend_len", "prefix_len", "extend_lens"]
MATCH = CELL + ["mode"]  # a simulated row and a torchrun row describe the same measurement
# link bandwidths of the "estimate at another link bandwidth" table, GB/s (1e9 B/s) per GPU
EST_BANDWIDTHS = ((50.0, "50 GB/s (e.g. InfiniBand NDR, 400 Gb/s per GPU)"), (25.0, "25 GB/s (200 Gb/s per GPU)"))


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df.columns else pd.Series(np.nan, index=df.index)


def torchrun_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of a prepared frame launched one process per rank."""
    if not len(df) or (df["launch"] == "torchrun").all():
        return df  # the frame itself: its critical-path view is shared within data.one_view()
    return df[df["launch"] == "torchrun"]


def phase_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Eager, ok torchrun rows of a prepared frame that carry phase times, with the phase columns as
    floats (``wait_us`` NaN -> 0) and ``gather_own_us = gather_us - wait_us`` added."""
    d = torchrun_rows(df)
    if d.empty:
        return d.iloc[0:0].assign(gather_own_us=pd.Series(dtype=float))
    d = d[(d["timing"] == Timing.EAGER) & (d["status"] == Status.OK)].copy()
    for c in PHASES + ("gather_bytes", "bus_gbps"):
        d[c] = _num(d, c)
    d = d[np.isfinite(d["gather_us"]) & np.isfinite(d["kv_write_us"]) & np.isfinite(d["attn_us"])]
    d["wait_us"] = d["wait_us"].fillna(0.0)
    d["gather_own_us"] = d["gather_us"] - d["wait_us"]
    return d


def has_phases(df: pd.DataFrame) -> bool:
    """True when a prepared frame holds at least one eager torchrun row with phase times."""
    return not phase_rows(df).empty


def stacks(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell x rank x mode: ``attn_us, kv_write_us, gather_own_us, wait_us`` (the stack, µs per
    forward), ``total_us`` (their sum = gather + kv_write + attn) and the rank's forward latency
    (median, p10, p90) for the whiskers."""
    d = phase_rows(df)
    cols = CELL + ["rank", "mode", "attn_us", "kv_write_us", "gather_own_us", "wait_us", "gather_us",
                   "latency_us_median", "latency_us_p10", "latency_us_p90", "num_layers"]
    d = d[cols].copy()
    d["total_us"] = d["attn_us"] + d["kv_write_us"] + d["gather_own_us"] + d["wait_us"]
    return d.sort_values(["cp_size", "bs", "prefix_len", "max_extend_len", "extend_lens", "rank", "mode"],
                         ascending=[True] * 6 + [False]).reset_index(drop=True)  # two-call before fused


def representative_cell(df: pd.DataFrame) -> pd.DataFrame:
    """The stack rows (``stacks``) of the largest cell (most tokens: max_extend_len x bs, then cp_size)."""
    s = stacks(df)
    if s.empty:
        return s
    key = s.assign(_tok=s["max_extend_len"] * s["bs"] + s["prefix_len"] * s["bs"]).sort_values(
        ["_tok", "max_extend_len", "cp_size"]).iloc[-1]
    return s[(s[CELL] == key[CELL]).all(axis=1)]


def share(df: pd.DataFrame) -> pd.DataFrame:
    """Gather share of the forward per cell and mode: per rank ``gather_us / latency_us_median``; the
    columns ``share`` (median over ranks), ``share_min``, ``share_max`` (rank spread)."""
    d = phase_rows(df)
    if d.empty:
        return pd.DataFrame(columns=CELL + ["mode", "share", "share_min", "share_max"])
    d = d.assign(_s=d["gather_us"] / d["latency_us_median"])
    g = d.groupby(CELL + ["mode"], sort=True)["_s"]
    return pd.DataFrame({"share": g.median(), "share_min": g.min(), "share_max": g.max()}).reset_index()


def t_gather_us(num_layers: float, cp_size: float, gather_bytes: float, gbps: float) -> float:
    """Estimated all-gather time per forward at link bandwidth ``gbps`` (GB/s = 1e9 B/s), µs:
    ``num_layers * (n-1)/n * gather_bytes / bw`` with n = cp_size and ``gather_bytes`` per layer per rank."""
    return ring_time_us(float(num_layers) * float(gather_bytes), cp_size, gbps)


def cell_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per torchrun cell and mode: critical path (µs, ``cells``), speedup of the cell, gather
    share (median, min, max over ranks), ``wait_max_us`` (max over ranks), ``bus_gbps`` (the cell's, from
    the fastest rank's gather), ``gather_bytes`` (per layer per rank), ``gather_min_us`` (fastest rank),
    ``work_max_us`` (max over ranks of attn + kv_write) and ``num_layers``. Phase values NaN where the
    cell has none (graph timing, failed cells)."""
    t = torchrun_rows(df)
    view = cells(t)
    if view.empty:
        return pd.DataFrame()
    out = []
    for mode, tag in ((m, m.tag) for m in MODES):
        v = view[CELL + ["status", "reason", "speedup", "speedup_ci_low", "speedup_ci_high"]].copy()
        v["mode"] = mode
        v["critical_us"] = view[f"{tag}_us"].to_numpy(float)
        out.append(v)
    v = pd.concat(out, ignore_index=True)
    p = phase_rows(t)
    if len(p):
        p = p.assign(_work=p["attn_us"] + p["kv_write_us"])
        g = p.groupby(MATCH, sort=True)
        agg = pd.DataFrame({"wait_max_us": g["wait_us"].max(), "bus_gbps": g["bus_gbps"].max(),
                            "gather_bytes": g["gather_bytes"].max(), "gather_min_us": g["gather_us"].min(),
                            "work_max_us": g["_work"].max(), "num_layers": g["num_layers"].max()}).reset_index()
        v = v.merge(agg, on=MATCH, how="left").merge(share(t), on=MATCH, how="left")
    for c in ("wait_max_us", "bus_gbps", "gather_bytes", "gather_min_us", "work_max_us", "num_layers",
              "share", "share_min", "share_max"):
        if c not in v.columns:
            v[c] = np.nan
    return v.sort_values(CELL + ["mode"], ascending=[True] * len(CELL) + [False]).reset_index(drop=True)


def estimates(summary: pd.DataFrame, bandwidths=EST_BANDWIDTHS) -> pd.DataFrame:
    """Per row of ``cell_summary`` with phase times: for each bandwidth ``bw`` (GB/s) the columns
    ``est_gather_us_<bw>`` (``t_gather_us``) and ``est_forward_us_<bw>`` = ``work_max_us`` (slowest
    rank's attention + KV write) + the estimated gather. An estimate, not a measurement."""
    s = summary[np.isfinite(pd.to_numeric(summary.get("work_max_us", pd.Series(dtype=float)),
                                          errors="coerce"))].copy() if len(summary) else summary
    for bw, _ in bandwidths:
        tag = f"{bw:g}"
        s[f"est_gather_us_{tag}"] = [t_gather_us(L, n, b, bw) for L, n, b in
                                     zip(s["num_layers"], s["cp_size"], s["gather_bytes"])]
        s[f"est_forward_us_{tag}"] = s["work_max_us"] + s[f"est_gather_us_{tag}"]
    return s.reset_index(drop=True)


def _critical_spread(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell and mode of a torchrun frame: p10/p90 over samples of the per-sample max over ranks
    (from ``samples_us``; NaN when the samples are not stored or differ in count)."""
    rows = []
    ok = df[df["status"] == Status.OK]
    if "samples_us" not in ok.columns or ok.empty:
        return pd.DataFrame(columns=MATCH + ["p10_us", "p90_us"])
    for key, g in ok.groupby(MATCH, sort=True):
        crit = critical_per_sample(list(g["samples_us"]))
        lo, hi = (math.nan, math.nan) if crit is None else (float(np.percentile(crit, 10)),
                                                           float(np.percentile(crit, 90)))
        rows.append(dict(zip(MATCH, key), p10_us=lo, p90_us=hi))
    return pd.DataFrame(rows, columns=MATCH + ["p10_us", "p90_us"])


def _long(view: pd.DataFrame, prefix: str) -> pd.DataFrame:
    out = []
    for mode, tag in ((m, m.tag) for m in MODES):
        v = view[CELL].copy()
        v["mode"] = mode
        v[f"{prefix}_us"] = view[f"{tag}_us"].to_numpy(float)
        v[f"{prefix}_p10_us"] = view[f"p10_{tag}_us"].to_numpy(float)
        v[f"{prefix}_p90_us"] = view[f"p90_{tag}_us"].to_numpy(float)
        out.append(v)
    return pd.concat(out, ignore_index=True)


def sim_vs_real(real: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """Matched cells (``MATCH``) of a torchrun frame and a simulated frame (both prepared): ``sim_us``
    (slowest rank's median, attention only) with its p10/p90, ``real_us`` (torchrun critical path with the
    gather) with the p10/p90 of the per-sample max over ranks (else the slowest rank's), ``diff_us =
    real - sim`` (what the one-GPU model misses) and ``ratio = real / sim``. Only cells that ran in both."""
    r, s = torchrun_rows(real), sim[sim["launch"] == "simulated"] if len(sim) else sim
    vr, vs = cells(r), cells(s)
    if vr.empty or vs.empty:
        return pd.DataFrame(columns=MATCH + ["sim_us", "real_us", "diff_us", "ratio"])
    lr, ls = _long(vr, "real"), _long(vs, "sim")
    spread = _critical_spread(r)
    lr = lr.merge(spread, on=MATCH, how="left")
    lr["real_p10_us"] = lr["p10_us"].fillna(lr["real_p10_us"])
    lr["real_p90_us"] = lr["p90_us"].fillna(lr["real_p90_us"])
    m = ls.merge(lr.drop(columns=["p10_us", "p90_us"]), on=MATCH, how="inner")
    m = m[np.isfinite(m["sim_us"]) & np.isfinite(m["real_us"]) & (m["sim_us"] > 0) & (m["real_us"] > 0)].copy()
    m["diff_us"] = m["real_us"] - m["sim_us"]
    m["ratio"] = m["real_us"] / m["sim_us"]
    return m.sort_values(MATCH, ascending=[True] * len(CELL) + [False]).reset_index(drop=True)


def topology_summary(topo) -> str:
    """One line from ``nvidia-smi topo -m`` output: the GPU-to-GPU link types and how many GPU pairs use
    each (e.g. ``8 GPUs; GPU↔GPU links: NV18 × 28 pairs``); "—" when absent or unreadable."""
    if not isinstance(topo, str) or not topo.strip():
        return "—"
    topo = re.sub(r"\x1b\[[0-9;]*m", "", topo)  # nvidia-smi underlines the header with ANSI codes
    lines = [ln for ln in topo.splitlines() if ln.strip()]
    at = next((i for i, ln in enumerate(lines) if "GPU0" in ln.split()[:2]), None)  # the header row
    if at is None:
        return "—"
    head = lines[at].split()
    rows = [ln.split() for ln in lines[at + 1:] if ln.split()[0].startswith("GPU") and ln.split()[0][3:].isdigit()]
    if not rows:
        return "—"
    ngpu = sum(1 for h in head if h.startswith("GPU") and h[3:].isdigit())
    links: dict[str, int] = {}
    for i, r in enumerate(rows[:ngpu]):
        for j in range(i + 1, min(ngpu, len(r) - 1)):
            links[r[1 + j]] = links.get(r[1 + j], 0) + 1
    if not links:
        return f"{ngpu} GPU(s)"
    return f"{ngpu} GPUs; GPU↔GPU links: " + ", ".join(f"{k} × {v} pair{'s' if v > 1 else ''}"
                                                      for k, v in sorted(links.items(), key=lambda kv: -kv[1]))
