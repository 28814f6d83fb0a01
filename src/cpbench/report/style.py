"""One look for every cpbench chart: sizes readable at GitHub PR width (~900 px), colour-blind-safe
colours, the Agg canvas set explicitly (no pyplot, no global backend switch), PNG + SVG output.

Conventions used by every chart: colour = batch size (or mode where bs is not shown), line style =
mode (two-call solid, fused dashed), failures are never drawn as 0 (non-positive values are dropped
from log axes), and an empty selection draws a "no data" panel instead of raising.
"""

from __future__ import annotations

import functools
import io
import math
import textwrap
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from cpbench.domain.modes import Mode
from cpbench.report.units import human_bytes, human_tokens  # noqa: F401 (the charts' axis labels; text imports units)

WIDTH_IN = 9.0  # 9 in at 100 dpi = GitHub's ~900 px column; PNGs are saved at 2x for sharpness
PNG_DPI = 160

# Okabe-Ito (colour-blind safe), black dropped; one colour per batch size, in order
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MODE_COLOR = {Mode.TWO_CALL: "#0072B2", Mode.FUSED: "#D55E00", Mode.CP_NATIVE: "#009E73"}
MODE_LINE = {Mode.TWO_CALL: "-", Mode.FUSED: "--", Mode.CP_NATIVE: "-."}
MODE_MARKER = {Mode.TWO_CALL: "o", Mode.FUSED: "s", Mode.CP_NATIVE: "^"}
FAIL_COLOR = "#d9d9d9"

RC = {
    "font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "legend.fontsize": 9,
    "xtick.labelsize": 9, "ytick.labelsize": 9, "figure.titlesize": 12, "figure.titleweight": "bold",
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.spines.top": False,
    "axes.spines.right": False, "lines.linewidth": 1.6, "lines.markersize": 5,
    "svg.hashsalt": "cpbench", "font.family": "DejaVu Sans",
}


def styled(fn: Callable) -> Callable:
    """Decorator: run a chart function inside the cpbench rc style."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with rc_context(RC):
            return fn(*args, **kwargs)
    return wrapper


def new_figure(nrows: int = 1, ncols: int = 1, height_in: float = 3.4, **kw) -> tuple[Figure, np.ndarray]:
    """A Figure on the Agg canvas, ``WIDTH_IN`` wide and ``height_in`` per row; axes as a 2-D array."""
    fig = Figure(figsize=(WIDTH_IN, max(2.4, height_in * nrows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def fit_suptitle(fig: Figure, min_size: float = 8.0) -> None:
    """Shrink the figure title's font (down to ``min_size`` pt), then wrap it, until it fits the figure's
    width: a long ``model · backend: title`` would otherwise run off both edges."""
    t = fig._suptitle
    if t is None or not t.get_text():
        return
    renderer = fig.canvas.get_renderer()
    room = fig.bbox.width * 0.97
    width = t.get_window_extent(renderer).width
    if width > room:
        t.set_fontsize(max(min_size, t.get_fontsize() * room / width))
    lines = t.get_text().split("\n")  # a title of several lines: each wrapped on its own
    chars = max(len(line) for line in lines)
    while t.get_window_extent(renderer).width > room and chars > 12:
        chars = int(chars * 0.9)
        t.set_text("\n".join(textwrap.fill(line, width=chars) for line in lines))


def save(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    """Write ``out_dir/name.png`` and ``out_dir/name.svg`` (no timestamps, so reruns diff cleanly), the
    title fitted to the width first (:func:`fit_suptitle`)."""
    fit_suptitle(fig)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    write_png(fig, png)
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]


def write_png(fig: Figure, path: Path) -> None:
    """Write ``fig`` as a 256-colour palette PNG at ``PNG_DPI``: the charts are flat colours, so the
    palette is visually lossless and the file 2-3x smaller than RGBA (run directories get committed
    and attached to pull requests). Pillow is a matplotlib dependency."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI, metadata={"Software": None})
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                   dither=Image.Dither.NONE).save(path, optimize=True)


def empty_chart(out_dir: Path, name: str, title: str, message: str = "no rows in this run") -> list[Path]:
    """Write a one-panel "no data" chart (same file names as the real one)."""
    fig, axes = new_figure(1, 1, height_in=2.4)
    fig.suptitle(title)
    no_data(axes[0, 0], message)
    return save(fig, out_dir, name)


def no_data(ax: Axes, message: str = "no data") -> None:
    """Turn ``ax`` into a labelled empty panel."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666666",
            fontsize=11, wrap=True)


def positive(x: Iterable) -> np.ndarray:
    """Boolean mask: finite and > 0 (what may go on a log axis)."""
    a = np.asarray(list(x), dtype=float)
    return np.isfinite(a) & (a > 0)


def log2_xaxis(ax: Axes, values: Iterable, label: str = "extend tokens per request", max_labels: int = 10) -> None:
    """Log2 x axis with a tick at every value present, labelled 1K/128K style (at most ``max_labels``
    labels: every k-th one, the last always labelled)."""
    vals = sorted({float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0})
    ax.set_xscale("log", base=2)
    if vals:
        ax.xaxis.set_major_locator(FixedLocator(vals))
        ax.xaxis.set_minor_locator(NullLocator())
        step = math.ceil(len(vals) / max_labels)
        shown = {vals[i] for i in range(len(vals) - 1, -1, -step)}
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_tokens(v) if v in shown else ""))
        if len(vals) == 1:
            ax.set_xlim(vals[0] / 1.6, vals[0] * 1.6)
        if len(shown) > 6:
            for t in ax.get_xticklabels():
                t.set_rotation(45)
    ax.set_xlabel(label)


def handle_like(line: Line2D, label: str, color: str | None = None) -> Line2D:
    """A legend handle drawn as ``line`` is drawn: its line style and width, its marker and size, and whether the
    marker is filled or open (a face other than the line's colour, such as fused's white), in ``color`` (the line's
    own when None). Legends built from the drawn artists show what the chart shows."""
    own = line.get_color()
    face = line.get_markerfacecolor()
    filled = not (isinstance(face, str) and face == "none") and to_rgba(face) == to_rgba(own)
    c = own if color is None else color
    return Line2D([], [], color=c, ls=line.get_linestyle(), lw=line.get_linewidth(), marker=line.get_marker(),
                  markersize=line.get_markersize(), markerfacecolor=c if filled else face, markeredgecolor=c,
                  label=label)


def whisker_handle(label: str) -> Line2D:
    """The legend entry that says what a chart's whiskers are (``whiskers: 95 % interval``, ``whiskers: p10–p90``)."""
    return Line2D([], [], color="#333333", ls="none", marker="|", markersize=11, markeredgewidth=1.2, label=label)


WHISKERS_CI = "whiskers: 95 % interval"


def bs_colors(bss: Iterable) -> dict:
    """Stable colour per batch size (sorted order)."""
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(sorted(set(bss)))}


def log_y(ax: Axes, fmt: Callable[[float], str] = lambda v: f"{v:,.0f}" if v >= 1e4 else f"{v:g}") -> None:
    """Log y axis with plain labels (0.1, 1, 10; 2 and 5 as well when the span is two decades or less, 1.5, 3
    and 7 too up to 1.3 decades; denser whenever fewer than three labels would fall inside the limits); a
    linear one when the data span less than a decade (a log axis would carry one or two labels). The axis label
    says "log scale" when the axis stays logarithmic, and only then (a caption cannot know). Call after plotting and
    labelling, when the limits are known."""
    ax.set_yscale("log")  # the span is read from the log autoscale: linear limits may reach down to 0
    lo, hi = ax.get_ylim()
    span = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    if span < 1:  # under a decade a log axis gets one or two labels: linear reads better
        ax.set_yscale("linear")
        ax.autoscale_view()
        return
    label = ax.get_ylabel()
    if label and "log scale" not in label:
        ax.set_ylabel(label[:-1] + ", log scale)" if label.endswith(")") else label + " (log scale)")
    # labelled ticks at 1, 1.5, 2, 3, 5, 7 x 10^k up to 1.3 decades (1, 2, 5 alone can leave the lowest line
    # unlabelled), 1, 2, 5 x 10^k up to two decades (a decade-only axis may show one label), else decades
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if span <= 1.3 else (1.0, 2.0, 5.0) if span <= 2 else (1.0,)
    for denser in ((1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)):  # at least three labels inside the limits
        if _ticks_within(lo, hi, subs) >= 3:
            break
        subs = denser if len(denser) > len(subs) else subs
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt(v) if v > 0 else ""))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _ticks_within(lo: float, hi: float, subs) -> int:
    """How many ticks ``sub x 10^k`` fall in ``[lo, hi]``."""
    if not (lo > 0 and hi > lo):
        return 0
    return sum(lo <= m * 10.0 ** k <= hi for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
               for m in subs)


def bytes_y(ax: Axes) -> None:
    """Log y axis for bytes, ticks at powers of 4 (256 B, 1 KiB, 4 KiB, ...)."""
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=4))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
