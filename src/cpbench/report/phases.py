"""Torchrun phase charts: per-rank stacked phases per cell, and a per-layer timeline sketch of one forward.

Both read eager torchrun rows with phase times (``dist_data.phase_rows``); the chart functions write no
file when a frame has none (``charts.render_frame`` only calls them for groups that have some).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from cpbench.report import style
from cpbench.report.dist_data import representative_cell, stacks
from cpbench.report.style import MODE_COLOR, no_data
from cpbench.results.schema import MODES

# (column, legend, colour, hatch): bottom to top in a stack, left to right within a layer of the timeline
PHASES = (("attn_us", "attention", "#009E73", ""), ("kv_write_us", "KV write", "#CC79A7", ""),
          ("gather_own_us", "all-gather (own)", "#E69F00", ""),
          ("wait_us", "wait in all-gather (for slower ranks)", "#F6D08B", "///"))
TIMELINE_ORDER = ("wait_us", "gather_own_us", "kv_write_us", "attn_us")  # gather (wait first), KV write, attention
MAX_FACETS = 12


def _cell_title(c: pd.Series) -> str:
    s = f"cp {c['cp_size']} · bs {c['bs']} · {style.human_tokens(c['max_extend_len'])}"
    return s + (f" + {style.human_tokens(c['prefix_len'])} prefix" if c["prefix_len"] > 0 else "")


def _phase_handles() -> list:
    return [Patch(facecolor=col, hatch=h, edgecolor="#555555" if h else col, label=lab) for _, lab, col, h in PHASES]


@style.styled
def phases_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Per cell (a panel each, the largest ``MAX_FACETS``), per rank and mode (two-call left, fused right,
    outlined in the mode colour): stacked attention, KV write, all-gather minus wait, and wait (ms per
    forward, eager), summing to the rank's gather + KV write + attention. Black whiskers: the rank's
    forward latency, median with p10–p90. Returns [] (no file) when ``df`` has no phase times."""
    s = stacks(df)
    if s.empty:
        return []
    keys = ["cp_size", "bs", "prefix_len", "max_extend_len", "extend_lens"]
    cells_ = list(s.groupby(keys, sort=True))[-MAX_FACETS:]
    ncols = min(3, len(cells_))
    nrows = math.ceil(len(cells_) / ncols)
    fig, axes = style.new_figure(nrows, ncols, height_in=2.9)
    total = s.groupby(keys).ngroups
    fig.suptitle(title + (f" (largest {len(cells_)} of {total} cells)" if total > len(cells_) else ""))
    for ax in axes.ravel()[len(cells_):]:
        ax.set_visible(False)
    for ax, (_, g) in zip(axes.ravel(), cells_):
        _stack_panel(ax, g)
    for ax in axes[:, 0]:
        ax.set_ylabel("ms per forward")
    handles = _phase_handles() + [Patch(facecolor="white", edgecolor=MODE_COLOR[m], lw=1.8, label=f"{m} bar")
                                  for m in MODES]
    handles.append(Line2D([], [], color="black", marker="_", ls="", markersize=8,
                          label="forward latency, median, p10–p90"))
    fig.legend(handles=handles, loc="outside lower center", ncol=4, frameon=False)
    return style.save(fig, out_dir, name)


def _stack_panel(ax, g: pd.DataFrame) -> None:
    ranks = sorted(set(g["rank"]))
    width = 0.38
    for k, mode in enumerate(MODES):
        m = g[g["mode"] == mode].set_index("rank").reindex(ranks)
        x = np.arange(len(ranks)) + (k - 0.5) * width
        bottom = np.zeros(len(ranks))
        for col, _, colour, hatch in PHASES:
            h = np.nan_to_num(m[col].to_numpy(float)) / 1e3
            ax.bar(x, h, width, bottom=bottom, color=colour, hatch=hatch, edgecolor=MODE_COLOR[mode], lw=0.9)
            bottom += h
        y = m["latency_us_median"].to_numpy(float) / 1e3
        lo = np.clip(np.nan_to_num(y - m["latency_us_p10"].to_numpy(float) / 1e3), 0, None)
        hi = np.clip(np.nan_to_num(m["latency_us_p90"].to_numpy(float) / 1e3 - y), 0, None)
        ax.errorbar(x, y, yerr=np.vstack([lo, hi]), fmt="_", color="black", markersize=8, capsize=2, elinewidth=1)
    ax.set_xticks(np.arange(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_title(_cell_title(g.iloc[0]), fontsize=9)


@style.styled
def timeline_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Gantt-like sketch of one forward of the largest cell: a panel per mode, ranks as rows, each layer
    laid out in order as wait + all-gather, KV write, attention, using the average per-layer phase times
    (phase_us / num_layers): not a trace. A black diamond with whiskers marks the rank's measured forward
    latency (median, p10–p90). Returns [] (no file) when ``df`` has no phase times."""
    c = representative_cell(df)
    if c.empty:
        return []
    modes = [m for m in MODES if (c["mode"] == m).any()]
    ranks = sorted(set(c["rank"]))
    fig, axes = style.new_figure(len(modes), 1, height_in=max(1.6, 0.45 * len(ranks) + 1.0), sharex=True)
    layers = int(np.nanmax(c["num_layers"])) if np.isfinite(c["num_layers"]).any() else 1
    layers = max(layers, 1)
    fig.suptitle(f"{title}\n{_cell_title(c.iloc[0])}, {layers} layers: per-layer phase times, timed apart "
                 "(the sum can exceed the forward)")
    for ax, mode in zip(axes[:, 0], modes):
        m = c[c["mode"] == mode].set_index("rank").reindex(ranks)
        if m["attn_us"].isna().all():
            no_data(ax, f"{mode}: no phase times")
            continue
        for i, r in enumerate(ranks):
            widths = [float(np.nan_to_num(m.loc[r, col])) / layers / 1e3 for col in TIMELINE_ORDER]
            layer_ms, start = sum(widths), 0.0
            for col, w in zip(TIMELINE_ORDER, widths):  # one bar set per phase: its segment in every layer
                _, _, colour, hatch = next(p for p in PHASES if p[0] == col)
                ax.broken_barh([(layer * layer_ms + start, w) for layer in range(layers)], (i - 0.35, 0.7),
                               facecolors=colour, hatch=hatch, edgecolor="white" if not hatch else "#888888", lw=0.3)
                start += w
            med = float(m.loc[r, "latency_us_median"]) / 1e3
            if math.isfinite(med):
                lo = max(0.0, med - float(np.nan_to_num(m.loc[r, "latency_us_p10"])) / 1e3)
                hi = max(0.0, float(np.nan_to_num(m.loc[r, "latency_us_p90"])) / 1e3 - med)
                ax.errorbar([med], [i], xerr=[[lo], [hi]], fmt="D", color="black", markersize=4, capsize=3)
        ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
        ax.set_ylim(-0.6, len(ranks) - 0.4)
        ax.invert_yaxis()
        ax.set_title(mode, fontsize=9.5, color=MODE_COLOR[mode])
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("ms from the start of the forward")
    handles = _phase_handles() + [Line2D([], [], color="black", marker="D", ls="", markersize=4,
                                         label="measured forward latency, median, p10–p90")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False)
    return style.save(fig, out_dir, name)
