"""Critical-path latency vs sequence length, and the fused effect heatmap (bs x extend length per cp_size): the
share of the two-call time fused saves, in the report's notation (:func:`cpbench.results.verdicts.effect_text`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.lines import Line2D

from cpbench.domain.modes import Mode, MODES, Status, Timing
from cpbench.results.verdicts import effect_text, is_tie
from cpbench.report import style
from cpbench.report.data import cells, uniform
from cpbench.report.style import MODE_LINE, MODE_MARKER, no_data, positive
from cpbench.report.units import EFFECT_UNIT
from cpbench.results.schema import MODES

MODE_COLUMNS = tuple((m, m.replace("-", "_")) for m in MODES)  # the mode and its tag in column names


def _grid(df: pd.DataFrame) -> tuple[list[str], list[int]]:
    timings = sorted(set(df["timing"]), key=lambda t: (t != Timing.EAGER, t != Timing.GRAPH, t)) if len(df) else []
    return timings or [""], sorted(set(df["cp_size"])) if len(df) else [0]


@style.styled
def latency_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Critical-path latency (ms, log y) vs max_extend_len (log2 x): a panel per timing x cp_size, a colour per
    series (bs), two-call solid / fused dashed, p10–p90 error bars of the slowest rank.

    Args: df: prepared rows of one model+backend (``data.prepare``); may be empty or hold only failures.
    Returns the PNG and SVG paths. Never raises on NaN, failed or missing cells.
    """
    if df.empty:
        return style.empty_chart(out_dir, name, title)
    timings, cps = _grid(df)
    fig, axes = style.new_figure(len(timings), len(cps), height_in=3.0, sharey=True)
    fig.suptitle(title)
    view = cells(df)
    labels = list(dict.fromkeys(view["label"])) if len(view) else []
    colors = {lab: style.PALETTE[i % len(style.PALETTE)] for i, lab in enumerate(labels)}
    drawn: dict = {}  # mode -> its first drawn line, for the legend
    for i, timing in enumerate(timings):
        for j, cp in enumerate(cps):
            ax = axes[i, j]
            v = view[(view["timing"] == timing) & (view["cp_size"] == cp)] if len(view) else view
            lines = _panel(ax, v, colors)
            if not lines:
                no_data(ax, f"cp {cp} · {timing}: no successful cells")
                continue
            drawn = {**lines, **drawn}
            ax.set_title(f"cp {cp} · {timing}")
            style.log2_xaxis(ax, v["max_extend_len"])
            if j == 0:
                ax.set_ylabel("latency, slowest rank (ms)")
            failed = int((v["status"] != Status.OK).sum())
            some = int(((v["status"] == Status.OK) & ~v["all_ranks"].map(lambda x: x is True or x == 1)).sum())
            notes = ([f"{failed} cell{'s' if failed != 1 else ''} did not run"] if failed else []) + (
                [f"{some} cell{'s' if some != 1 else ''} on some ranks only (slowest measured rank, "
                 "not the critical path)"] if some else [])
            if notes:
                ax.text(0.02, 0.97, "\n".join(notes), transform=ax.transAxes, va="top", fontsize=8, color="#a00000")
    for ax in axes.ravel():
        if ax.axison:
            style.log_y(ax)
    if drawn:  # the modes as drawn (fused's open markers), then what the whiskers are
        handles = [Line2D([], [], color=colors[lab], lw=2, label=lab) for lab in labels]
        handles += [style.handle_like(drawn[m], m, "#333333") for m, _ in MODE_COLUMNS if m in drawn]
        handles.append(style.whisker_handle("whiskers: p10–p90 of the slowest rank"))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False)
    return style.save(fig, out_dir, name)


def _panel(ax, v: pd.DataFrame, colors: dict) -> dict:
    """Draw ``v``'s latencies on ``ax``; returns ``{mode: its first drawn line}`` (empty: nothing drawn)."""
    drawn: dict = {}
    for lab, g in v.groupby("label", sort=False):
        g = g.sort_values("max_extend_len")
        for mode, tag in MODE_COLUMNS:
            y = g[f"{tag}_us"].to_numpy(float) / 1e3
            keep = positive(y)
            if not keep.any():
                continue
            x = g["max_extend_len"].to_numpy(float)[keep]
            y = y[keep]
            lo = g[f"p10_{tag}_us"].to_numpy(float)[keep] / 1e3
            hi = g[f"p90_{tag}_us"].to_numpy(float)[keep] / 1e3
            err = np.vstack([np.clip(np.nan_to_num(y - lo), 0, None), np.clip(np.nan_to_num(hi - y), 0, None)])
            bars = ax.errorbar(x, y, yerr=err, color=colors[lab], ls=MODE_LINE[mode], marker=MODE_MARKER[mode],
                               capsize=2.5, elinewidth=1, markerfacecolor="white" if mode == Mode.FUSED else colors[lab])
            drawn.setdefault(mode, bars.lines[0])
    return drawn


def _norm(values: np.ndarray) -> TwoSlopeNorm:
    """Diverging norm centred on 1.0, symmetric in log space, at least ±5% wide."""
    finite = values[np.isfinite(values) & (values > 0)]
    r = max([abs(math.log(x)) for x in finite] + [math.log(1.05)])
    return TwoSlopeNorm(vcenter=1.0, vmin=math.exp(-r), vmax=math.exp(r))


@style.styled
def speedup_heatmap(df: pd.DataFrame, out_dir: Path, name: str, title: str,
                    bar_label: str = f"{EFFECT_UNIT} (blue: fused faster)", neutral: bool = False) -> list[Path]:
    """The share of the two-call time fused saves on the critical path (from the speedup two-call / fused), bs
    (rows) x extend length (columns), a panel per cp_size (rows) x timing (columns). Diverging colours centred on
    no effect (speedup 1.0; blue: fused faster), the effect in each cell (:func:`heat_text`); a tie (:mod:`cpbench.results.verdicts`: the speedup's 95 % interval
    contains 1) is marked "≈" after the value and drawn in the neutral colour of 1.0 (noise is not coloured
    as a win or a loss); cells that did not run are grey, hatched and labelled with their status, and cells
    measured on some ranks only (no critical path) with the ranks measured ("1/4 ranks"). ``bar_label``:
    the colour bar's label. ``neutral`` (a CPU run, which claims no speedup): every cell in the neutral
    colour, values written without the tie mark (a verdict it does not make), no colour bar. Returns PNG and
    SVG paths."""
    if df.empty:
        return style.empty_chart(out_dir, name, title)
    timings, cps = _grid(df)
    view = cells(df)
    fig, axes = style.new_figure(len(cps), len(timings), height_in=2.6 if len(cps) > 1 else 3.2)
    fig.suptitle(title)
    norm = _norm(view["speedup"].to_numpy(float) if len(view) else np.array([]))
    panel_in = (style.WIDTH_IN - 1.6) / len(timings)  # minus the colour bar and the y labels
    image = None
    for i, cp in enumerate(cps):
        for j, timing in enumerate(timings):
            ax = axes[i, j]
            v = view[(view["timing"] == timing) & (view["cp_size"] == cp)] if len(view) else view
            if v.empty:
                no_data(ax, f"cp {cp} · {timing}: no cells")
                continue
            image = _heat(ax, v, norm, panel_in, neutral) or image
            ax.set_title(f"cp {cp} · {timing}")
    if image is not None and not neutral and np.isfinite(view["speedup"].to_numpy(float)).any():
        cb = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.9, pad=0.02)
        cb.set_label(bar_label)
        effect_ticks(cb, norm)
    return style.save(fig, out_dir, name)


EFFECT_TICKS = (-90, -75, -50, -30, -20, -10, -5, -2, 0, 2, 5, 10, 20, 30, 50, 75, 90)  # % of two-call time


def effect_ticks(cb, norm: TwoSlopeNorm) -> None:
    """Label a speedup colour bar in the effect's unit: ticks at round shares of the two-call time fused saves
    (``+10 %``: speedup ``1 / 0.9``), those inside the bar's range (at most seven, 0 always)."""
    inside = [p for p in EFFECT_TICKS if norm.vmin <= 1 / (1 - p / 100) <= norm.vmax]
    while len(inside) > 7:
        inside = [p for i, p in enumerate(inside) if p == 0 or i % 2 == inside.index(0) % 2]
    cb.set_ticks([1 / (1 - p / 100) for p in inside], labels=[f"{p:+d} %".replace("-", "−") if p else "0"
                                                                 for p in inside])
    cb.minorticks_off()


def heat_text(speedup: float, cell_pt: float) -> str:
    """A heatmap cell's text: the effect as the tables print it (:func:`effect_text`), without the space before
    ``%`` in a narrow cell (under 40 pt)."""
    text = effect_text(speedup)
    return text if cell_pt >= 40 else text.replace(" %", "%")


def heat_shade(grid: np.ndarray, tie: dict, neutral: bool = False) -> np.ndarray:
    """The values a speedup heatmap colours: ``grid`` (speedups, NaN where a cell did not run) with 1.0, the
    diverging map's neutral centre, for every tie (``tie[(row, col)]``) or, with ``neutral``, every cell."""
    shade = grid.copy()
    for (r, k), is_tie_cell in tie.items():
        if (is_tie_cell or neutral) and math.isfinite(shade[r, k]):
            shade[r, k] = 1.0
    return shade


def _heat(ax, v: pd.DataFrame, norm: TwoSlopeNorm, panel_in: float = 7.0, neutral: bool = False):
    keys = [(s, p, "" if uniform(sl) else sl) for s, p, sl in zip(v["max_extend_len"], v["prefix_len"], v["extend_lens"])]
    cols = sorted(set(keys))
    rows = sorted(set(v["bs"]))
    grid = np.full((len(rows), len(cols)), np.nan)
    status, tie = {}, {}
    for key, (_, c) in zip(keys, v.iterrows()):
        r, k = rows.index(c["bs"]), cols.index(key)
        grid[r, k] = c["speedup"] if c["status"] == Status.OK else np.nan
        status[(r, k)] = (c["status"] if c["status"] != Status.OK or c.get("all_ranks", True) is not False
                          else f"{int(c['ranks_measured'])}/{int(c['cp_size'])} ranks")
        tie[(r, k)] = is_tie(c["speedup"], c.get("speedup_ci_low", np.nan), c.get("speedup_ci_high", np.nan))
    ax.grid(False)
    ax.set_facecolor("white")
    shade = heat_shade(grid, tie, neutral)
    image = ax.imshow(np.ma.masked_invalid(shade), cmap="RdBu", norm=norm, aspect="auto", origin="lower")
    cell_pt = panel_in / len(cols) * 72
    size = float(np.clip(cell_pt / 4.2, 6.0, 9.0))  # "+12.3%" is ~3.9 em wide
    for (r, k), st in status.items():
        val = grid[r, k]
        if st == Status.OK and math.isfinite(val):
            dark = abs(norm(shade[r, k]) - 0.5) > 0.3
            ax.text(k, r, heat_text(val, cell_pt) + ("≈" if tie[(r, k)] and not neutral else ""),
                    ha="center", va="center", fontsize=size, color="white" if dark else "black")
        else:
            ax.add_patch(_fail_patch(k, r))
            text = st if st != Status.OK else "n/a"
            ax.text(k, r, text if text.endswith(" ranks") else text[: max(3, int(cell_pt / size * 1.6))], ha="center",
                    va="center", fontsize=size - 0.5, color="#404040")
    ax.set_xticks(range(len(cols)), [_col_label(c) for c in cols], rotation=45 if cell_pt < 40 else 0)
    ax.set_yticks(range(len(rows)), [str(b) for b in rows])
    ax.set_xlabel("extend tokens per request")
    ax.set_ylabel("batch size")
    return image


def _fail_patch(x: int, y: int):
    from matplotlib.patches import Rectangle
    return Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor=style.FAIL_COLOR, edgecolor="#9a9a9a", hatch="///",
                     lw=0.0)


def _col_label(c: tuple) -> str:
    seq, prefix, seq_lens = c
    s = style.human_tokens(seq)
    if prefix > 0:
        s += f"+{style.human_tokens(prefix)}p"
    if seq_lens:
        s += " uneven"
    return s
