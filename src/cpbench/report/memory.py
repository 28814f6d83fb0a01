"""Measured device memory per mode, by kind of allocation (the ``setup_mem_*`` columns), with the
fused call's page-table duplicates (the full table's and, with --swa-pool, the SWA pool's) as a share of
what the mode holds."""

from __future__ import annotations

import math

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MultipleLocator

from cpbench.domain.modes import Mode, MODES, Status
from cpbench.results.schema import SETUP_PARTS
from cpbench.report import style
from cpbench.report.style import MODE_COLOR, human_bytes, no_data

PART_COLOR = {"page_table": "#d55e00", "swa_page_table": "#f0e442", "metadata": "#e69f00", "plan": "#56b4e9", "workspace": "#bbbbbb",
              "outputs": "#009e73", "comm": "#cc79a7", "other": "#666666"}
PART_LABEL = {"page_table": "duplicated page table", "swa_page_table": "duplicated SWA page table (--swa-pool)",
              "metadata": "metadata (indptr, indices)",
              "plan": "plan + int workspace", "workspace": "float workspace (shared)", "outputs": "outputs",
              "comm": "all-gather buffers", "other": "other", "forward": "forward's transient peak"}


def share_text(x: float) -> str:
    """A fraction as a percentage for labels and tables: ``0.123 -> '12 %'``, tiny shares ``'<0.01 %'``."""
    if not np.isfinite(x):
        return "—"
    return "<0.01 %" if 0 < 100 * x < 0.01 else f"{100 * x:.2g} %"


def setup_memory_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Per (backend, cp_size, bs, max_extend_len, mode), over ok rows with measured memory: the rank holding the most
    (``setup_mem_bytes``), its ``setup_mem_<part>`` bytes, ``forward_mem_bytes``, ``peak_mem_bytes``
    and ``dup_share`` (the duplicated tables, SWA pool's included, / setup_mem_bytes, a fraction). Empty when nothing was
    measured (CPU runs: the columns are NaN)."""
    cols = [f"setup_mem_{p}" for p in SETUP_PARTS] + ["setup_mem_bytes", "forward_mem_bytes", "peak_mem_bytes"]
    keys = [k for k in ("backend",) if k in df] + ["cp_size", "bs", "max_extend_len", "mode"]
    d = df[df["status"] == Status.OK].copy()
    for c in cols:
        d[c] = pd.to_numeric(d[c], errors="coerce") if c in d else np.nan
    d = d[d["setup_mem_bytes"] > 0]
    if d.empty:
        return pd.DataFrame(columns=keys + cols + ["dup_share"])
    d = d.sort_values("setup_mem_bytes").groupby(keys, sort=True).tail(1)  # the rank holding the most
    d = d.sort_values(keys)[keys + cols].reset_index(drop=True)
    d["dup_share"] = (d["setup_mem_page_table"] + d["setup_mem_swa_page_table"].fillna(0)) / d["setup_mem_bytes"]
    return d


@style.styled
def setup_memory_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Stacked bars per cell, two-call beside fused: device bytes the mode's setup holds by kind, plus
    the first forward's transient peak (hatched); the fused bar is labelled with the duplicated page
    table's share. A "not measured" panel (with the rows' ``mem_reason``) when no row has memory."""
    m = setup_memory_frame(df)
    fig, axes = style.new_figure(1, 1, height_in=3.8)
    fig.suptitle(title)
    ax = axes[0, 0]
    if m.empty:
        reasons = sorted({str(r) for r in df.get("mem_reason", pd.Series(dtype=str)).dropna() if str(r)})
        no_data(ax, "device memory not measured" + (f": {reasons[0]}" if reasons else ""))
        return style.save(fig, out_dir, name)
    cells_ = m[["cp_size", "bs", "max_extend_len"]].drop_duplicates().to_records(index=False)
    width, x0 = 0.38, np.arange(len(cells_))
    parts = [p for p in SETUP_PARTS if (m[f"setup_mem_{p}"] > 0).any()]
    for j, mode in enumerate(MODES):
        sub = m[m["mode"] == mode].set_index(["cp_size", "bs", "max_extend_len"])
        for i, cell in enumerate(cells_):
            key = tuple(int(v) for v in cell)
            if key not in sub.index:
                continue
            r, bottom, x = sub.loc[key], 0.0, x0[i] + (j - 0.5) * width
            for p in parts:
                v = float(r[f"setup_mem_{p}"])
                ax.bar(x, v, width, bottom=bottom, color=PART_COLOR[p], edgecolor=MODE_COLOR[mode], lw=1.2)
                bottom += v
            fwd = float(r["forward_mem_bytes"]) if np.isfinite(r["forward_mem_bytes"]) else 0.0
            if fwd > 0:
                ax.bar(x, fwd, width, bottom=bottom, color="none", hatch="///", edgecolor=MODE_COLOR[mode], lw=1.2)
            if mode == Mode.FUSED and r["setup_mem_page_table"] + np.nan_to_num(r["setup_mem_swa_page_table"]) > 0:
                ax.text(x, bottom + fwd, share_text(r["dup_share"]), ha="center", va="bottom", fontsize=6,
                        rotation=90)
    ax.set_xticks(x0, [f"cp{c}\nbs{b}\n{style.human_tokens(s)}" for c, b, s in cells_],
                  fontsize=8 if len(cells_) <= 12 else 6)
    ax.set_ylabel("device memory held by the mode")
    top = float((m["setup_mem_bytes"] + m["forward_mem_bytes"].fillna(0)).max())
    ax.yaxis.set_major_locator(MultipleLocator(2.0 ** max(0, math.floor(math.log2(max(top, 1) / 4)))))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))  # linear: stacked parts add up
    handles = [Patch(facecolor=PART_COLOR[p], label=PART_LABEL[p]) for p in parts]
    handles += [Patch(facecolor="none", hatch="///", edgecolor="#333333", label=PART_LABEL["forward"])]
    handles += [Patch(facecolor="white", edgecolor=MODE_COLOR[md], lw=1.5, label=f"{md} (left/right)") for md in MODES]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, frameon=False, fontsize=8)
    ax.text(0.01, 0.98, "label on fused bars: duplicated page table(s) as % of the setup's memory",
            transform=ax.transAxes, va="top", fontsize=7, color="#555555")
    return style.save(fig, out_dir, name)
