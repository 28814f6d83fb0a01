"""GPU vs host time per mode (eager vs graph), and per-rank latency (zigzag balance)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from cpbench.domain.modes import Mode, MODES, Status, Timing
from cpbench.report import style
from cpbench.report.data import cells, pick_timing, timing_cells
from cpbench.report.style import MODE_COLOR, MODE_LINE, MODE_MARKER, no_data, positive
from cpbench.results.schema import MODES

# (quantity, timing, line style, marker, legend text)
# one convention in every chart: dashed is the fused mode, dotted is eager timing (README)
QUANTITIES = (("gpu", Timing.EAGER, ":", "o", "GPU forward, eager"), ("gpu", Timing.GRAPH, "-", "s", "GPU forward, graph"),
              ("gpu", Timing.BREAKABLE, (0, (6, 2)), "D", "GPU forward, breakable (the whole layer)"),
              ("setup", None, (0, (3, 1, 1, 1, 1, 1)), "^", "host setup (metadata+page table+plan)"),
              ("launch", Timing.EAGER, "-.", "v", "host launch, eager"))


def cpu_words(label: str) -> str:
    """A legend text in CPU words: no GPU, no FlashInfer plan (the torch reference has none)."""
    return label.replace("GPU forward", "forward").replace("+plan", "")


def overhead_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Per (cp_size, bs, max_extend_len, mode, timing) over ok rows: ``gpu_us`` (slowest rank's median),
    ``setup_us`` (median over ranks of setup_us_total, else the sum of its parts) and ``launch_us``
    (median host_launch_us). All µs."""
    ok = df[df["status"] == Status.OK].copy()
    parts = ok[["setup_us_metadata", "setup_us_page_table", "setup_us_plan"]].sum(axis=1, min_count=1)
    ok["setup"] = ok["setup_us_total"].fillna(parts)
    keys = ["cp_size", "bs", "max_extend_len", "mode", "timing"]
    if ok.empty:
        return pd.DataFrame(columns=keys + ["gpu_us", "setup_us", "launch_us"])
    g = ok.groupby(keys, sort=True)
    return pd.DataFrame({"gpu_us": g["latency_us_median"].max(), "setup_us": g["setup"].median(),
                         "launch_us": g["host_launch_us"].median()}).reset_index()


@style.styled
def overhead_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str, cpu: bool = False) -> list[Path]:
    """GPU forward latency (eager, graph and breakable, slowest rank: those the run timed) vs host setup and host
    launch time, µs (log y)
    against max_extend_len, drawn in ms, a panel per bs at the largest cp_size, colour = mode. ``cpu``: CPU words (forward,
    setup without a plan). PNG + SVG paths."""
    if df.empty:
        return style.empty_chart(out_dir, name, title)
    o = overhead_frame(df)
    cp = int(o["cp_size"].max()) if len(o) else 0
    o = o[o["cp_size"] == cp]
    bss = sorted(set(o["bs"])) or [0]
    ncols = min(3, len(bss))
    nrows = math.ceil(len(bss) / ncols)
    fig, axes = style.new_figure(nrows, ncols, height_in=3.2, sharey=True)
    fig.suptitle(f"{title} (cp {cp})" if len(o) else title)
    for ax in axes.ravel()[len(bss):]:
        ax.set_visible(False)
    shown: set = set()
    for ax, bs in zip(axes.ravel(), bss):
        g = o[o["bs"] == bs]
        drawn = False
        for mode in MODES:
            for qty, timing, ls, mk, _ in QUANTITIES:
                s = g[g["mode"] == mode]
                if timing:
                    s = s[s["timing"] == timing]
                s = s.groupby("max_extend_len", sort=True)[f"{qty}_us"].median()
                keep = positive(s.values)
                if keep.any():
                    ax.plot(s.index.to_numpy(float)[keep], s.values[keep] / 1e3, ls=ls, marker=mk,  # ms
                            color=MODE_COLOR[mode])
                    drawn = True
                    shown.add((qty, timing))
        if not drawn:
            no_data(ax, f"bs {bs}: no successful cells" if len(o) else "no successful cells")
            continue
        ax.set_title(f"bs {bs}")
        style.log2_xaxis(ax, g["max_extend_len"])
        if ax in axes[:, 0]:
            ax.set_ylabel("ms per forward")
    for ax in axes.ravel():
        if ax.axison and ax.get_visible():
            style.log_y(ax, lambda v: f"{v:,.0f}" if v >= 100 else f"{v:g}")
    if shown:
        handles = [Line2D([], [], color=MODE_COLOR[m], lw=2.5, label=m) for m in MODES]
        handles += [Line2D([], [], color="#333333", ls=ls, marker=mk, label=cpu_words(t) if cpu else t)
                    for q, tm, ls, mk, t in QUANTITIES if (q, tm) in shown]
        fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False)
    return style.save(fig, out_dir, name)


def balance_cell(v: pd.DataFrame) -> pd.Series | None:
    """The longest fully-ok cell (largest max_extend_len, then bs) of a ``cells`` view, or None."""
    ok = v[(v["status"] == Status.OK) & np.isfinite(v["two_call_us"]) & np.isfinite(v["fused_us"])]
    if ok.empty:
        return None
    return ok.sort_values(["max_extend_len", "bs"]).iloc[-1]


@style.styled
def balance_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Zigzag balance, a column per cp_size: top, per-rank latency (ms, p10–p90) of both modes for the
    longest cell, with the imbalance ratio max/min; bottom, that ratio vs max_extend_len for every cell (colour
    = bs, fused dashed). Uses graph timing when present (kernel time). PNG + SVG paths."""
    if df.empty:
        return style.empty_chart(out_dir, name, title)
    timing, rows = pick_timing(df, Timing.GRAPH)
    view = timing_cells(df, timing) if len(rows) else cells(rows)
    cps = sorted(set(view["cp_size"])) if len(view) else [0]
    fig, axes = style.new_figure(2, len(cps), height_in=3.0)
    fig.suptitle(f"{title} ({timing})" if timing else title)
    colors = style.bs_colors(view["bs"]) if len(view) else {}
    drawn, lines = False, {}  # lines: mode -> its first drawn imbalance line, for the legend
    for j, cp in enumerate(cps):
        v = view[view["cp_size"] == cp] if len(view) else view
        cell = balance_cell(v) if len(v) else None
        if cell is None:
            no_data(axes[0, j], f"cp {cp}: no successful cell")
            no_data(axes[1, j], "")
            continue
        _rank_bars(axes[0, j], rows, cell)
        lines = {**_imbalance_lines(axes[1, j], v, colors), **lines}
        drawn = True
    axes[0, 0].set_ylabel("latency (ms, y zoomed)")
    axes[1, 0].set_ylabel("imbalance, slowest / fastest rank")
    if drawn:  # bars and lines as drawn (fused's open markers), then what the bars' whiskers are
        handles = [Patch(color=MODE_COLOR[m], label=f"{m} (bars)") for m in MODES]
        handles += [Line2D([], [], color=c, lw=2, label=f"bs {b}") for b, c in colors.items()]
        handles += [style.handle_like(lines[m], f"{m} (lines)", "#333333") for m in MODES if m in lines]
        handles.append(style.whisker_handle("whiskers: p10–p90"))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False)
    return style.save(fig, out_dir, name)


def _rank_bars(ax, rows: pd.DataFrame, cell: pd.Series) -> None:
    sel = rows[(rows["cp_size"] == cell["cp_size"]) & (rows["bs"] == cell["bs"]) & (rows["max_extend_len"] == cell["max_extend_len"])
               & (rows["prefix_len"] == cell["prefix_len"]) & (rows["extend_lens"] == cell["extend_lens"])
               & (rows["launch"] == cell["launch"]) & (rows["status"] == Status.OK)]
    ranks = sorted(set(sel["rank"]))
    x = np.arange(len(ranks))
    for k, mode in enumerate(MODES):
        m = sel[sel["mode"] == mode].set_index("rank").reindex(ranks)
        y = m["latency_us_median"].to_numpy(float) / 1e3
        y = np.where(positive(y), y, np.nan)  # a zero is a failure, not a bar
        err = np.vstack([np.clip(np.nan_to_num(y - m["latency_us_p10"].to_numpy(float) / 1e3), 0, None),
                         np.clip(np.nan_to_num(m["latency_us_p90"].to_numpy(float) / 1e3 - y), 0, None)])
        ax.bar(x + (k - 0.5) * 0.4, y, 0.4, yerr=err, capsize=2, color=MODE_COLOR[mode])
    lat = sel["latency_us_median"].to_numpy(float)
    lo = np.nanmin(lat[positive(lat)]) / 1e3
    hi = max(np.nanmax(sel["latency_us_p90"].fillna(sel["latency_us_median"]).to_numpy(float)) / 1e3, lo)
    ax.set_ylim(max(0.0, lo - (hi - lo) * 1.5), hi + (hi - lo) * 0.9 + 1e-9)  # zoom: balance is a few %
    ax.set_xticks(x, [str(r) for r in ranks])
    ax.set_xlabel("rank")
    imb = " · ".join(f"{m} {cell[f'imbalance_{m.replace(chr(45), chr(95))}']:.3f}" for m in MODES)
    ax.set_title(f"cp {cell['cp_size']} · bs {cell['bs']}, {style.human_tokens(cell['max_extend_len'])} tokens\n"
                 f"imbalance {imb}", fontsize=9)


def _imbalance_lines(ax, v: pd.DataFrame, colors: dict) -> dict:
    """Draw each bs's imbalance per mode; returns ``{mode: its first drawn line}``."""
    drawn: dict = {}
    for bs, g in v.groupby("bs", sort=True):
        g = g.sort_values("max_extend_len")
        for mode in MODES:
            y = g[f"imbalance_{mode.replace('-', '_')}"].to_numpy(float)
            keep = positive(y)
            if keep.any():
                (line,) = ax.plot(g["max_extend_len"].to_numpy(float)[keep], y[keep], color=colors[bs],
                                  ls=MODE_LINE[mode], marker=MODE_MARKER[mode],
                                  markerfacecolor="white" if mode == Mode.FUSED else colors[bs])
                drawn.setdefault(mode, line)
    style.log2_xaxis(ax, v["max_extend_len"], max_labels=6 if ax.get_subplotspec().get_gridspec().ncols < 3 else 4)
    return drawn
