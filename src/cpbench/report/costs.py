"""Attention-kernel counts per rank, and page-table memory / duplication cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator

from cpbench.domain.modes import Mode, MODES, Status, Timing
from cpbench.results.schema import CELL_COLUMNS, MODES
from cpbench.report import style
from cpbench.report.data import pick_timing
from cpbench.results.critical_path import ranks_label
from cpbench.report.style import MODE_COLOR, no_data, positive
from cpbench.report.tables import modes_text


def kernel_cell(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the first cell (sorted by bs, max_extend_len) where every rank of both modes has a kernel count;
    empty if none. Kernel counts do not depend on the cell for a fixed model, so one cell shows them."""
    for _, g in df.groupby(list(CELL_COLUMNS), sort=True):
        need = {(r, m) for r in set(g["rank"]) for m in MODES}
        have = g[np.isfinite(g["attn_kernels"].to_numpy(float)) & (g["attn_kernels"] > 0)]
        if set(zip(have["rank"], have["mode"])) >= need:
            return have
    return df.iloc[0:0]


def kernel_counts(df: pd.DataFrame) -> dict:
    """``{cp_size: {mode: {"per_rank": {rank: n}, "total": n, "cell": str, "varies": bool, "all_ranks": bool,
    "ranks_label": str}}}`` of attention kernels per forward (GPU executions), from the eager rows when
    present. ``total`` sums the measured ranks; it is an all-rank total only when ``all_ranks``."""
    out: dict = {}
    _, rows = pick_timing(df, Timing.EAGER)
    for cp, g in rows.groupby("cp_size", sort=True):
        cell = kernel_cell(g)
        if cell.empty:
            continue
        first = cell.iloc[0]
        label = f"bs {first['bs']}, {style.human_tokens(first['max_extend_len'])} tokens, {first['timing']}"
        out[cp] = {}
        for mode in MODES:
            m = cell[cell["mode"] == mode].sort_values("rank")
            per_rank = {int(r): int(n) for r, n in zip(m["rank"], m["attn_kernels"])}
            allm = g[(g["mode"] == mode) & np.isfinite(g["attn_kernels"].to_numpy(float))]
            out[cp][mode] = {"per_rank": per_rank, "total": sum(per_rank.values()), "cell": label,
                             "varies": allm["attn_kernels"].nunique() > 1,
                             "all_ranks": sorted(per_rank) == list(range(int(cp))),
                             "ranks_label": ranks_label(per_rank, int(cp))}
    return out


def counts_missing(rows: pd.DataFrame, calls: bool = False) -> str:
    """Why rows that ran have no attention counts to draw (``calls``: the torch reference's attention calls), for the
    report; "" when they have counts, or when no row ran (every chart of such a run says so in its own panel)."""
    ok = rows[rows["status"] == Status.OK] if len(rows) and "status" in rows else rows.iloc[0:0]
    if ok.empty or kernel_counts(rows):
        return ""
    what = f"attention {'calls' if calls else 'kernels'}"
    if not set(MODES) <= set(ok["mode"]):  # the chart sets fused's counts against two-call's
        return f"the run measured {modes_text(set(rows['mode']))} only: its {what} are set against no other mode's"
    if not (ok["timing"] == Timing.EAGER).any():  # breakable and graph rows carry none (no profiler there)
        return (f"{what} are counted on the profiled eager forward, and this run timed no eager cell "
                f"({', '.join(sorted(set(ok['timing'])))} only)")
    return f"no eager cell recorded its {what} per forward (--no-profile, or its profiled forward failed)"


@style.styled
def kernels_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str, calls: bool = False) -> list[Path]:
    """Attention kernels per forward on each rank, two-call vs fused bars, a panel per cp_size; the
    legend gives per-rank and over-all-ranks totals (e.g. 72/rank, 288 over 4 ranks). ``calls``: the
    counts are attention calls (the torch reference on a CPU), and the axis says so. PNG + SVG paths."""
    if df.empty:
        return style.empty_chart(out_dir, name, title)
    counts = kernel_counts(df)
    fig, axes = style.new_figure(1, max(1, len(counts)), height_in=3.6, sharey=True)
    fig.suptitle(title)
    if not counts:
        no_data(axes[0, 0], "no kernel counts recorded (no successful profiled cell)")
    for ax, (cp, by_mode) in zip(axes[0], counts.items()):
        ranks = sorted(set().union(*[set(v["per_rank"]) for v in by_mode.values()]))
        x = np.arange(len(ranks))
        for k, mode in enumerate(MODES):
            v = by_mode[mode]
            n = [v["per_rank"].get(r, 0) for r in ranks]
            per = max(n) if n else 0
            bars = ax.bar(x + (k - 0.5) * 0.4, n, 0.4, color=MODE_COLOR[mode],
                          label=f"{mode}: {per}/rank, " + (f"{v['total']} over {len(ranks)} ranks" if v["all_ranks"]
                                                            else f"{v['ranks_label']} measured"))
            ax.bar_label(bars, fontsize=8, padding=1)
        ax.set_xticks(x, [str(r) for r in ranks])
        ax.set_xlabel("rank")
        ax.set_title(f"cp {cp} · {by_mode[Mode.FUSED]['cell']}", fontsize=9.5)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
        ax.legend(loc="upper center", fontsize=8, frameon=False)
        if any(v["varies"] for v in by_mode.values()):
            ax.text(0.5, -0.28, "counts differ between cells; this cell shown", transform=ax.transAxes,
                    ha="center", fontsize=8, color="#a00000")
    axes[0, 0].set_ylabel(f"attention {'calls' if calls else 'kernels'} per forward")
    return style.save(fig, out_dir, name)


def memory_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Per (bs, context_len), medians over cells/ranks of the fused rows (the ones with a duplicated
    table): ``page_table_bytes, page_table_dup_bytes, kv_total_bytes`` (kv_cache_bytes * num_layers),
    ``dup_copy_us`` and the two tables as % of the KV cache. With ``--swa-pool`` (``swa_page_table_bytes``
    > 0) also each pool's table apart: ``full_table_bytes`` / ``full_dup_bytes`` (the full pool's
    ``[bs, W]`` and its ``[2*bs, W]`` duplicate) and ``swa_table_bytes`` / ``swa_dup_bytes`` (the SWA pool's);
    0 without it."""
    f = df[df["mode"] == Mode.FUSED].copy()
    f["kv_total_bytes"] = f["kv_cache_bytes"] * f["num_layers"]
    swa = pd.to_numeric(f.get("swa_page_table_bytes", pd.Series(0, index=f.index)), errors="coerce").fillna(0)
    f["swa_table_bytes"], f["swa_dup_bytes"] = swa, 2 * swa
    f["full_table_bytes"] = f["page_table_bytes"] - swa
    f["full_dup_bytes"] = 2 * f["full_table_bytes"]
    cols = ["page_table_bytes", "page_table_dup_bytes", "kv_total_bytes", "dup_copy_us", "full_table_bytes",
            "full_dup_bytes", "swa_table_bytes", "swa_dup_bytes"]
    if f.empty:
        return pd.DataFrame(columns=["bs", "context_len"] + cols)
    m = f.groupby(["bs", "context_len"], sort=True)[cols].median().reset_index()
    kv = m["kv_total_bytes"].where(m["kv_total_bytes"] > 0)
    m["page_table_pct"] = 100.0 * m["page_table_bytes"] / kv
    m["dup_pct"] = 100.0 * m["page_table_dup_bytes"] / kv
    return m


def _same_for_every_bs(m: pd.DataFrame, cols: list[str]) -> bool:
    """True when every bs has the same value of each of ``cols`` at each context length (to 1e-9 relative):
    the page table and the KV cache both grow with bs, so their ratio usually does not depend on it."""
    for _, g in m.groupby("context_len"):
        for col in cols:
            v = pd.to_numeric(g[col], errors="coerce").dropna().to_numpy(float)
            if len(v) > 1 and not np.allclose(v, v[0], rtol=1e-9, atol=0.0):
                return False
    return True


@style.styled
def memory_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Page table [bs, W] vs duplicated table [2*bs, W]: bytes, % of the KV cache over all layers, and
    the measured duplication copy time (µs), against context length, a colour per bs. With --swa-pool the
    bytes panel draws each pool's table and its duplicate apart (the SWA pool's with triangles); the other
    panels count both tables. PNG + SVG paths."""
    if df.empty:
        return style.empty_chart(out_dir, name, title)
    m = memory_frame(df)
    swa = bool((m["swa_table_bytes"] > 0).any())
    fig, axes = style.new_figure(1, 3, height_in=3.5)
    fig.suptitle(title)
    colors = style.bs_colors(m["bs"])
    table_lines = ([("full_table_bytes", "-"), ("full_dup_bytes", "--"), ("swa_table_bytes", "-^"),
                    ("swa_dup_bytes", "--v")] if swa else [("page_table_bytes", "-"), ("page_table_dup_bytes", "--")])
    panels = (("bytes", table_lines),
              ("% of KV cache (all layers)", [("page_table_pct", "-"), ("dup_pct", "--")]),
              ("duplication copy (µs)", [("dup_copy_us", "--")]))
    drawn, same_pct = False, _same_for_every_bs(m, ["page_table_pct", "dup_pct"])
    for ax, (ylabel, series) in zip(axes[0], panels):
        any_line = False
        pct = "%" in ylabel
        for bs, g in m.groupby("bs", sort=True):
            if pct and same_pct and bs != m["bs"].min():
                continue  # one line stands for every bs (both the table and the KV cache grow with bs)
            for col, ls in series:
                keep = positive(g[col])
                if keep.any():
                    line, marker = ls.rstrip("^v"), ls[-1] if ls[-1] in "^v" else ("o" if ls == "-" else "s")
                    ax.plot(g["context_len"].to_numpy(float)[keep], g[col].to_numpy(float)[keep], ls=line,
                            marker=marker, color="#333333" if pct and same_pct and len(colors) > 1 else colors[bs],
                            mfc="white" if marker in "^v" else None)
                    any_line = True
        if not any_line:
            no_data(ax, f"{ylabel}: not recorded")
            continue
        drawn = True
        ax.set_ylabel(ylabel)
        style.log2_xaxis(ax, m["context_len"], "context length (tokens)", max_labels=5)
        if ylabel == "bytes":
            style.bytes_y(ax)
        elif pct:  # tiny and narrow: linear from 0 reads better than a log axis
            ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
            ax.yaxis.set_major_locator(MaxNLocator(nbins=4, steps=[1, 2, 5, 10]))
            ax.yaxis.set_major_formatter(FuncFormatter(
                lambda v, _: np.format_float_positional(v, precision=2, fractional=False, trim="-") + "%"))
            if same_pct and len(colors) > 1:
                ax.set_title("the same for every bs", fontsize="small")
        else:  # the copy time from 0: on a log axis, or cut above 0, noise between cells read as a trend
            ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    if drawn:
        handles = [Line2D([], [], color=c, lw=2, label=f"bs {b}") for b, c in colors.items()]
        if swa:  # both pools' tables have the same shape (SGLang sizes them alike): the markers overlap
            handles += [Line2D([], [], color="#333333", ls="-", marker="o", label="full pool [bs, W]"),
                        Line2D([], [], color="#333333", ls="--", marker="s", label="full pool, fused [2·bs, W]"),
                        Line2D([], [], color="#333333", ls="-", marker="^", mfc="white", label="SWA pool [bs, W]"),
                        Line2D([], [], color="#333333", ls="--", marker="v", mfc="white", label="SWA pool, fused [2·bs, W]")]
        else:
            handles += [Line2D([], [], color="#333333", ls="-", marker="o", label="page table [bs, W]"),
                        Line2D([], [], color="#333333", ls="--", marker="s", label="duplicated [2·bs, W] (fused)")]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4 if swa else 6), frameon=False)
    return style.save(fig, out_dir, name)
