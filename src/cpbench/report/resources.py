"""Throughput (TFLOP/s and % of the run's measured matmul peak) and measured device memory per mode:
the report's "Throughput and memory" section and the throughput chart (no torch)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from cpbench.domain.modes import Mode, Status
from cpbench.report import style
from cpbench.report.memory import setup_memory_frame, share_text
from cpbench.report.style import MODE_LINE, MODE_MARKER, human_bytes, human_tokens, no_data
from cpbench.report.tables import md_table
from cpbench.results.schema import MODES

KEYS = ["model", "backend", "timing", "cp_size", "bs", "max_extend_len", "prefix_len", "extend_lens"]


def throughput_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell and mode (ok rows of a cell that ran on all its ranks): ``tflops`` = per-GPU throughput
    on the critical path, sum over ranks of the rank's attention FLOPs / (cp_size x the slowest rank's
    median latency), in TFLOP/s, with ``tflops_low/high`` from that rank's 95 % CI of the median; ``pct_peak`` = tflops / the run's measured matmul peak
    (``gemm_peak_tflops``) x 100 (NaN without one)."""
    ok = df[df["status"] == Status.OK].copy()
    cols = KEYS + ["mode", "tflops", "tflops_low", "tflops_high", "pct_peak"]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    for c in ("flops", "latency_us_median", "latency_us_ci_low", "latency_us_ci_high", "gemm_peak_tflops"):
        ok[c] = pd.to_numeric(ok[c], errors="coerce") if c in ok else np.nan
    out = []
    for key, g in ok.groupby(KEYS + ["mode"], sort=True):
        cp = int(key[KEYS.index("cp_size")])
        if sorted({int(r) for r in g["rank"]}) != list(range(cp)):
            continue  # a partial cell has no critical path
        slow = g.loc[g["latency_us_median"].idxmax()]  # the slowest rank's median and its 95 % CI
        work = float(g["flops"].sum()) / cp / 1e12

        def rate(us: float) -> float:
            return work / (us * 1e-6) if us > 0 else math.nan
        tflops = rate(float(slow["latency_us_median"]))
        peak = float(g["gemm_peak_tflops"].max()) if g["gemm_peak_tflops"].notna().any() else math.nan
        out.append([*key, tflops, rate(float(slow["latency_us_ci_high"])), rate(float(slow["latency_us_ci_low"])),
                    100.0 * tflops / peak if peak > 0 else math.nan])
    return pd.DataFrame(out, columns=cols)


def _num(v: float, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "—"


def _rounds(peak: dict) -> str:
    """``"5"``, or ``"5 (781.2–807.0 TFLOP/s)"`` when the manifest keeps the rate of each round."""
    rates = [x for x in peak.get("gemm_tflops_rounds") or [] if isinstance(x, (int, float))]
    return f"{len(rates)} ({min(rates):.1f}–{max(rates):.1f} TFLOP/s)" if rates else "5"


def _rate(r) -> str:
    """``97.6 [96.9–98.0]``: TFLOP/s with the interval from the slowest rank's latency CI."""
    lo, hi = float(r["tflops_low"]), float(r["tflops_high"])
    ci = f" [{lo:.1f}–{hi:.1f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return _num(r["tflops"], ".1f") + ci


def resources_section(df: pd.DataFrame, manifest: dict, cpu: bool = False) -> list[str]:
    """Markdown lines: the measured matmul peak, a TFLOP/s table (two-call vs fused, % of peak), and a
    memory table (setup bytes and peak per mode on the most loaded rank, duplicated page table share),
    or one line saying why memory was not measured. ``cpu``: one line instead (a functional check has
    no throughput to report, and the CPU allocator no statistics)."""
    peak = manifest.get("gemm_peak") or {}
    out = ["## Throughput and memory", ""]
    if cpu:
        return out + ["Not reported for a CPU run (a functional check): its timings are not a benchmark, and "
                      "memory is not measured on CPU (the CPU allocator keeps no statistics).", ""]
    if isinstance(peak.get("gemm_tflops"), (int, float)) and math.isfinite(peak["gemm_tflops"]):
        shape = "×".join(str(x) for x in peak.get("gemm_shape", []))
        out += [f"Matmul peak measured at the start of the run: **{peak['gemm_tflops']:.1f} TFLOP/s** "
                f"({peak.get('gemm_dtype', '')} {shape}, best of {_rounds(peak)} rounds of {peak.get('gemm_reps', '')} matmuls, "
                f"{peak.get('gemm_timer', '')}); attention TFLOP/s below are per GPU on the critical path "
                "(all ranks' attention FLOPs / (cp_size × slowest rank's latency)).", ""]
    elif pd.to_numeric(df.get("gemm_peak_tflops", pd.Series(dtype=float)), errors="coerce").gt(0).any():
        out += [f"Matmul peak recorded in the rows: **{df['gemm_peak_tflops'].max():.1f} TFLOP/s** (its shape is "
                "not in the manifest); attention TFLOP/s below are per GPU on the critical path.", ""]
    else:
        out += ["_No matmul peak in this run (an older run, or its measurement failed: see the manifest's "
                "gemm_peak): TFLOP/s without % of peak._", ""]
    tp = throughput_frame(df)
    if not tp.empty:
        rows = []
        for key, g in tp.groupby(KEYS, sort=True):
            c = dict(zip(KEYS, key))
            by = {r["mode"]: r for _, r in g.iterrows()}
            cell = [c["backend"], c["timing"], c["cp_size"], c["bs"], human_tokens(c["max_extend_len"])]
            for m in MODES:
                r = by.get(m)
                cell += [_rate(r) if r is not None else "—", _num(r["pct_peak"], ".1f") if r is not None else "—"]
            rows.append(cell)
        out += [md_table(["backend", "timing", "cp>", "bs>", "tokens>", "two-call TFLOP/s [95% CI]>", "% peak>",
                          "fused TFLOP/s [95% CI]>", "% peak>"], rows), ""]
    mem = setup_memory_frame(df)
    if mem.empty:
        reasons = sorted({str(r) for r in df.get("mem_reason", pd.Series(dtype=str)).dropna() if str(r)})
        out += [f"Device memory: {reasons[0] if reasons else 'not measured in this run'}.", ""]
        return out
    rows = []
    for key, g in mem.groupby(["backend", "cp_size", "bs", "max_extend_len"], sort=True):
        by = {r["mode"]: r for _, r in g.iterrows()}
        cell = [key[0], key[1], key[2], human_tokens(key[3])]
        for m in MODES:
            r = by.get(m)
            cell += [human_bytes(r["setup_mem_bytes"]) if r is not None else "—",
                     human_bytes(r["peak_mem_bytes"]) if r is not None else "—"]
        f = by.get(Mode.FUSED)
        cell.append(f"{human_bytes(f['setup_mem_page_table'])} ({share_text(f['dup_share'])})" if f is not None else "—")
        rows.append(cell)
    out += ["Device memory each mode needs on its most loaded rank, measured with the CUDA allocator from "
            "before its setup (setup: what the metadata, page tables, plans, workspace and outputs hold; peak: "
            "setup plus the first forward's transient peak):", "",
            md_table(["backend", "cp>", "bs>", "tokens>", "two-call setup>", "two-call peak>", "fused setup>", "fused peak>",
                      "duplicated page table (share of fused setup)>"], rows), ""]
    return out


@style.styled
def throughput_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Per-GPU attention TFLOP/s on the critical path vs tokens per request, a panel per timing x
    cp_size, a colour per bs, two-call solid / fused dashed; the right axis reads % of the measured
    matmul peak when the rows carry one."""
    tp = throughput_frame(df)
    if tp.empty:
        return style.empty_chart(out_dir, name, title, "no cell ran on all its ranks")
    timings, cps = sorted(set(tp["timing"])), sorted(set(tp["cp_size"]))
    fig, axes = style.new_figure(len(timings), len(cps), height_in=3.0, sharey="row")
    fig.suptitle(title)
    colors = style.bs_colors(tp["bs"])
    peak = pd.to_numeric(df.get("gemm_peak_tflops", pd.Series(dtype=float)), errors="coerce").max()
    drawn: dict = {}  # mode -> its first drawn line, for the legend
    for i, t in enumerate(timings):
        for j, cp in enumerate(cps):
            ax, sub = axes[i, j], tp[(tp["timing"] == t) & (tp["cp_size"] == cp)]
            if sub.empty:
                no_data(ax)
                continue
            for (bs, mode), g in sub.groupby(["bs", "mode"], sort=True):
                g = g.sort_values("max_extend_len")
                (line,) = ax.plot(g["max_extend_len"], g["tflops"], ls=MODE_LINE[mode], marker=MODE_MARKER[mode],
                                  color=colors[bs])
                drawn.setdefault(mode, line)
            ax.set_title(f"{t} · cp {cp}")
            style.log2_xaxis(ax, sub["max_extend_len"], max_labels=5)
            ax.set_ylim(bottom=0)
            if j == 0:
                ax.set_ylabel("TFLOP/s per GPU")
            if np.isfinite(peak) and peak > 0 and j == len(cps) - 1:
                sec = ax.secondary_yaxis("right", functions=(lambda v: 100 * v / peak, lambda p: p * peak / 100))
                sec.set_ylabel("% of matmul peak")
    handles = [Line2D([], [], color=c, lw=2, label=f"bs {b}") for b, c in colors.items()]
    handles += [style.handle_like(drawn[m], m, "#333333") for m in MODES if m in drawn]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False)
    return style.save(fig, out_dir, name)
