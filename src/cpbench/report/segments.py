"""Where fusion stops paying: the fused call's segment count (2*bs) against its speedup, per backend.

A run with at least :data:`MIN_BATCHES` batch sizes at one (cp_size, extend length, prefix) gets this chart:
x = segments in the fused call (2*bs, log2), left panel the share of the two-call time fused saves on the critical
path (the report's notation, :func:`cpbench.results.verdicts.effect_text`) with its 95 % interval (one line per backend, eager dotted with open markers, graph solid; a host-bound
eager cell crossed, off the line, and drawn at the axis edge with its value when outside the others' range),
right panel the fused forward's latency per segment (µs; a log axis when it spans a decade), where a kernel
that stalls past some segment count shows as a step.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from cpbench.domain.modes import Status, Timing
from cpbench.report import style
from cpbench.report.data import cells
from cpbench.results.critical_path import flags
from cpbench.results.verdicts import effect_text, saved_share
from cpbench.report.units import EFFECT_UNIT

MIN_BATCHES = 3
TIMING_LINE = {Timing.GRAPH: "-", Timing.EAGER: ":"}  # dotted eager, as in every chart (dashed is reserved for fused)
HOST_COLOR = "#222222"  # the legend's host-bound cross (on the chart each cross takes its backend's colour)


def segment_axes(view: pd.DataFrame) -> pd.DataFrame:
    """The ok, all-rank cells of a critical-path view that lie on a batch-size axis: the (cp_size, max_extend_len,
    prefix_len) with the most distinct ``bs`` (at least :data:`MIN_BATCHES`), with ``segments = 2*bs``.
    Empty when no such axis exists."""
    if view.empty:
        return view
    ok = view[(view["status"] == Status.OK) & view["speedup"].map(lambda x: math.isfinite(float(x)))]
    if ok.empty:
        return ok
    sizes = ok.groupby(["cp_size", "max_extend_len", "prefix_len"])["bs"].nunique()
    if sizes.max() < MIN_BATCHES:
        return ok.iloc[0:0]
    cp, seq, prefix = sizes.idxmax()
    axis = ok[(ok["cp_size"] == cp) & (ok["max_extend_len"] == seq) & (ok["prefix_len"] == prefix)]
    return axis.assign(segments=2 * axis["bs"]).sort_values("segments")


def has_segment_axis(df: pd.DataFrame) -> bool:
    """True when a prepared frame holds a batch-size axis for :func:`segments_chart`."""
    return not segment_axes(cells(df)).empty


@style.styled
def segments_chart(df: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    """Fused effect (the share of the two-call time fused saves, with its 95 % interval) and fused µs per segment
    vs the fused call's segment count, a colour
    per backend, graph solid / eager dotted. ``df``: prepared rows of the whole run (every backend).
    Returns the PNG and SVG paths; an empty chart when the run has no batch-size axis."""
    axis = segment_axes(cells(df))
    if axis.empty:
        return style.empty_chart(out_dir, name, title, f"needs >= {MIN_BATCHES} batch sizes at one extend length")
    c0 = axis.iloc[0]
    fig, axes = style.new_figure(1, 2, height_in=3.4)
    fig.suptitle(f"{title}: cp {c0['cp_size']}, {style.human_tokens(c0['max_extend_len'])} extend tokens per request")
    left, right = axes[0, 0], axes[0, 1]
    backends = sorted(set(axis["backend"]))
    host, handles, span = [], [], []
    for i, backend in enumerate(backends):
        color = style.PALETTE[i % len(style.PALETTE)]
        for timing, v in axis[axis["backend"] == backend].groupby("timing"):
            x = v["segments"].to_numpy(float)
            speedup = v["speedup"].to_numpy(float)
            s = _pct(speedup)
            lo = np.nan_to_num(s - _pct(v["speedup_ci_low"]), nan=0.0).clip(0)
            hi = np.nan_to_num(_pct(v["speedup_ci_high"]) - s, nan=0.0).clip(0)
            # graph: filled markers, eager: open ones (and dotted), so the legend tells them apart at a glance
            style_kw = dict(color=color, ls=TIMING_LINE.get(timing, ":"), marker="o", ms=4,
                            mfc=color if timing == Timing.GRAPH else "white")
            # the eager ratio of a host-bound cell measures the launching CPU: a cross, off the line and
            # out of the axis range (drawn at the edge with its value when it lies outside)
            hb = flags(v["host_bound"]).to_numpy(bool) if "host_bound" in v else np.zeros(len(v), bool)
            keep = ~hb
            left.errorbar(x[keep], s[keep], yerr=[lo[keep], hi[keep]], capsize=2, **style_kw)
            span += [*(s[keep] - lo[keep]), *(s[keep] + hi[keep])]
            host += [(xi, yi, color, sp) for xi, yi, sp in zip(x[hb], s[hb], speedup[hb])]
            # a proxy line: an errorbar's own legend entry does not show its line style (eager vs graph)
            handles.append(Line2D([], [], label=f"{backend} · {timing}", lw=1.5, **style_kw))
            right.plot(x, v["fused_us"].to_numpy(float) / x, label=f"{backend} · {timing}", **style_kw)
    _host_bound_marks(left, host, span)
    left.axhline(0.0, color="#555555", lw=0.8)
    left.set_ylabel(EFFECT_UNIT)
    left.set_title("fusion's effect, whiskers: 95 % interval")
    right.set_ylabel("fused latency per segment (µs)")
    right.set_title("fused forward / segments")
    style.log_y(right)
    for ax in (left, right):
        style.log2_xaxis(ax, axis["segments"], label="segments in the fused call (2·bs)")
    marked = bool(host)
    if marked:
        handles.append(Line2D([], [], ls="none", marker="x", ms=8, mew=1.6, color=HOST_COLOR,
                              label="host-bound eager (CPU launch rate); at the edge: off scale"))
    # one legend for both panels, under them: inside, it would cover points or off-scale values
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3), fontsize=7.5,
               handlelength=3.2, frameon=False)
    return style.save(fig, out_dir, name)


def _pct(speedups) -> np.ndarray:
    """Speedups two-call / fused as the share of the two-call time fused saves, in percent."""
    return np.array([100 * saved_share(x) for x in np.asarray(speedups, dtype=float)], dtype=float)


def _host_bound_marks(ax, points: list[tuple[float, float, str, float]], span: list[float]) -> None:
    """Cross the host-bound eager ``(segments, effect %, backend colour, speedup)`` points. The y range is the
    other points' (their intervals, and 0); a cross outside it is drawn at the edge with its effect
    (:func:`effect_text`), so a CPU-bound effect does not set the scale of the kernel's answer."""
    vals = [v for v in span if math.isfinite(v)]
    if not vals:
        for x, y, color, _ in points:
            ax.plot([x], [y], ls="none", marker="x", ms=9, mew=1.6, color=color)
        return
    lo, hi = min(*vals, 0.0), max(*vals, 0.0)
    pad = 0.08 * (hi - lo or 10.0)
    lo, hi = lo - pad, hi + pad
    ax.set_ylim(lo, hi)
    for x, y, color, speedup in points:
        shown = min(max(y, lo), hi)
        ax.plot([x], [shown], ls="none", marker="x", ms=9, mew=1.6, color=color, clip_on=False)
        if shown != y:
            ax.annotate(effect_text(speedup), (x, shown), xytext=(8, 0), ha="left", va="center",
                        textcoords="offset points", fontsize=7, color=color)
