"""Torchrun vs the one-GPU model: the all-gather's share of the forward, and the simulated vs the real
critical path of matched cells."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from cpbench.domain.modes import Mode, MODES, Timing
from cpbench.report import style
from cpbench.report.data import line_label, pick_timing
from cpbench.report.dist_data import share, sim_vs_real
from cpbench.report.style import MODE_LINE, MODE_MARKER, no_data, positive



def _labels(d: pd.DataFrame) -> pd.Series:
    return pd.Series([line_label(b, p, e) for b, p, e in zip(d["bs"], d["prefix_len"], d["extend_lens"])],
                     index=d.index, dtype=object)


def _legend(fig, colors: dict, extra: list) -> None:
    handles = [Line2D([], [], color=c, lw=2, label=lab) for lab, c in colors.items()] + extra
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False)


@style.styled
def gather_share_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """All-gather share of the forward, ``gather_us / latency_us_median`` in % (eager torchrun rows), vs
    max_extend_len: a panel per cp_size, one line per (bs, mode) at the median over ranks, error bars = rank
    spread (min..max over ranks). Returns [] (no file) when ``df`` has no phase times."""
    s = share(df)
    if s.empty:
        return []
    s = s.assign(label=_labels(s))
    cps = sorted(set(s["cp_size"]))
    fig, axes = style.new_figure(1, len(cps), height_in=3.4, sharey=True)
    fig.suptitle(title)
    colors = {lab: style.PALETTE[i % len(style.PALETTE)] for i, lab in enumerate(dict.fromkeys(s["label"]))}
    drawn: dict = {}  # mode -> its first drawn line, for the legend
    for ax, cp in zip(axes[0], cps):
        v = s[s["cp_size"] == cp]
        for (lab, mode), g in v.groupby(["label", "mode"], sort=False):
            g = g.sort_values("max_extend_len")
            y = 100 * g["share"].to_numpy(float)
            err = np.vstack([np.clip(y - 100 * g["share_min"].to_numpy(float), 0, None),
                             np.clip(100 * g["share_max"].to_numpy(float) - y, 0, None)])
            bars = ax.errorbar(g["max_extend_len"].to_numpy(float), y, yerr=err, color=colors[lab],
                               ls=MODE_LINE[mode], marker=MODE_MARKER[mode], capsize=2.5, elinewidth=1,
                               markerfacecolor="white" if mode == Mode.FUSED else colors[lab])
            drawn.setdefault(mode, bars.lines[0])
        ax.set_title(f"cp {cp} · eager")
        style.log2_xaxis(ax, v["max_extend_len"])
        ax.set_ylim(bottom=0)
    axes[0, 0].set_ylabel("all-gather / forward latency (%)")
    _legend(fig, colors, [style.handle_like(drawn[m], m, "#333333") for m in MODES if m in drawn]
            + [style.whisker_handle("whiskers: min..max over ranks")])
    return style.save(fig, out_dir, name)


@style.styled
def sim_vs_real_chart(df_real: pd.DataFrame, df_sim: pd.DataFrame, out_dir: Path, name: str = "sim_vs_real",
                      title: str = "simulated vs real (torchrun) critical path", device: str = "") -> list[Path]:
    """Critical path of matched cells (``dist_data.sim_vs_real``; eager timing preferred): a panel per
    cp_size (rows) x mode (columns), ms (log y) vs max_extend_len, colour = bs; real torchrun solid with filled
    markers (p10–p90 of the per-sample max over ranks), simulated dotted with hollow markers (slowest
    rank's p10–p90). The title names the matched cells' model and backend and ``device`` (the GPU, from the
    manifest), as every other chart's does. Both frames prepared. Writes a "no data" chart when no cell matches."""
    m = sim_vs_real(df_real, df_sim)
    timing, m = pick_timing(m, Timing.EAGER) if len(m) else ("", m)
    named = m if len(m) else df_real
    head = " · ".join(", ".join(sorted({str(x) for x in named[k].dropna() if str(x)})) for k in ("model", "backend")
                      if k in named and len(named))
    title = f"{' · '.join(x for x in (head, device) if x)}: {title}" if head or device else title
    if m.empty:
        return style.empty_chart(out_dir, name, title, "no cell ran in both the simulated and the torchrun run")
    m = m.assign(label=_labels(m))
    cps = sorted(set(m["cp_size"]))
    fig, axes = style.new_figure(len(cps), 2, height_in=3.0, sharey=True)
    fig.suptitle(f"{title} ({timing})")
    colors = {lab: style.PALETTE[i % len(style.PALETTE)] for i, lab in enumerate(dict.fromkeys(m["label"]))}
    drawn: dict = {}  # real / sim -> its first drawn line, for the legend
    for i, cp in enumerate(cps):
        for j, mode in enumerate(MODES):
            ax, v = axes[i, j], m[(m["cp_size"] == cp) & (m["mode"] == mode)]
            if v.empty:
                no_data(ax, f"cp {cp} · {mode}: no matched cell")
                continue
            for lab, g in v.groupby("label", sort=False):
                g = g.sort_values("max_extend_len")
                for kind, ls, fill in (("real", "-", True), ("sim", ":", False)):
                    y = g[f"{kind}_us"].to_numpy(float) / 1e3
                    keep = positive(y)
                    lo = np.clip(np.nan_to_num(y - g[f"{kind}_p10_us"].to_numpy(float) / 1e3), 0, None)
                    hi = np.clip(np.nan_to_num(g[f"{kind}_p90_us"].to_numpy(float) / 1e3 - y), 0, None)
                    bars = ax.errorbar(g["max_extend_len"].to_numpy(float)[keep], y[keep],
                                       yerr=np.vstack([lo, hi])[:, keep], color=colors[lab], ls=ls,
                                       marker=MODE_MARKER[mode], capsize=2.5, elinewidth=1,
                                       markerfacecolor=colors[lab] if fill else "white")
                    drawn.setdefault(kind, bars.lines[0])
            ax.set_title(f"cp {cp} · {mode}")
            style.log2_xaxis(ax, v["max_extend_len"])
        axes[i, 0].set_ylabel("critical path (ms)")
    for ax in axes.ravel():
        if ax.axison:
            style.log_y(ax)
    words = {"real": "real (torchrun, with gather)", "sim": "simulated (attention only)"}
    _legend(fig, colors, [style.handle_like(line, words[kind], "#333333") for kind, line in drawn.items()]
            + [style.whisker_handle("whiskers: p10–p90")])
    return style.save(fig, out_dir, name)
