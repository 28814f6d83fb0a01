"""What the fusion buys of the whole prefill forward: the ``breakable`` timing read back (no torch), as the
study's part of a run's report (:data:`REPORT`: the "Prefill forward" section after the summary, the ``forward``
chart first in each group's chart table).

A breakable row times a forward as SGLang runs it under breakable prefill CUDA graphs: every layer's other
work (norms, projections, MLP or MoE) replayed from graph segments, attention launched eagerly between them.
Per cell and backend this module derives, from the critical-path view (``report.data.cells``):

* the fusion's effect on the forward: ``saved = two_call_us - fused_us`` (µs), its share of the two-call
  forward ``1 - fused / two_call`` with the 95 % interval mapped from the speedup's (``1 - 1 / speedup`` is
  monotonic), and the verdict (a tie when the speedup interval contains 1);
* attention's share of the forward: the graph-timed attention-only forward over the breakable forward, per
  mode (both on their critical paths; graph timing is kernel time, as the replayed segments are);
* whether the host was hidden: every rank's median host issue time below its median forward.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from cpbench.domain.modes import MODES, Mode, Status, Timing
from cpbench.report import style
from cpbench.report.style import human_tokens
from cpbench.report.study import StudyReport
from cpbench.report.units import EFFECT_UNIT
from cpbench.report.tables import answer, forward_text, md_table, ms
from cpbench.results.critical_path import flag
from cpbench.results.verdicts import saved_share

CELL_KEYS = ["model", "backend", "cp_size", "bs", "max_extend_len", "prefix_len", "extend_lens"]
MXFP4_LINE = ("gpt-oss stores its experts in MXFP4, which torch cannot run here: the stand-in experts run in {dtype} "
              "and move more bytes than the deployment, so the rest-of-layer time is an upper bound and "
              "attention's share of the forward a lower bound.")


def attention_share(view: pd.DataFrame, c: pd.Series, mode_tag: str = Mode.FUSED.tag) -> float:
    """Attention's share of cell ``c``'s breakable forward in one mode: the graph-timed attention-only
    forward's critical path over the breakable one (NaN without a graph row of the same cell)."""
    same = view[(view["timing"] == Timing.GRAPH)]
    for k in CELL_KEYS:
        if k in view:
            same = same[same[k] == c[k]]
    if same.empty:
        return math.nan
    a, f = float(same.iloc[0][f"{mode_tag}_us"]), float(c[f"{mode_tag}_us"])
    return a / f if f > 0 and math.isfinite(a) else math.nan


def forward_cells(view: pd.DataFrame) -> pd.DataFrame:
    """The breakable rows of a critical-path view, with ``saved_us``, ``saved_pct`` (and its interval
    ``saved_pct_low``/``saved_pct_high``), ``attn_share_two_call``/``attn_share_fused`` (fractions)."""
    if view.empty or "timing" not in view:
        return view.iloc[0:0]
    fw = view[view["timing"] == Timing.BREAKABLE].copy()
    if fw.empty:
        return fw
    fw["saved_us"] = fw["two_call_us"] - fw["fused_us"]
    fw["saved_pct"] = [100 * saved_share(s) for s in fw["speedup"]]
    fw["saved_pct_low"] = [100 * saved_share(s) for s in fw["speedup_ci_low"]]
    fw["saved_pct_high"] = [100 * saved_share(s) for s in fw["speedup_ci_high"]]
    for tag in (m.tag for m in MODES):
        fw[f"attn_share_{tag}"] = [attention_share(view, c, tag) for _, c in fw.iterrows()]
    return fw


def forward_section(view: pd.DataFrame, df: pd.DataFrame) -> list[str]:
    """The report's "Prefill forward" section: per cell and backend the forward's two-call and fused ms on
    the critical path, what the fusion saves with its interval, attention's share, host hidden or exposed,
    how the segments ran; the critical-path rule and the weights note. Empty without breakable rows."""
    fw = forward_cells(view)
    if fw.empty:
        return []
    rows = []
    for _, c in fw.iterrows():
        share = c["attn_share_fused"]
        rows.append([c["backend"], c["cp_size"], c["bs"], human_tokens(c["max_extend_len"]),
                     ms(c["two_call_us"]), ms(c["fused_us"]), forward_text(c),
                     f"{100 * share:.0f} %" if math.isfinite(share) else "—",
                     "—" if c["status"] != Status.OK else "hidden" if flag(c.get("host_hidden")) else "exposed",
                     _segments(df, c)])
    b = df[df["timing"] == Timing.BREAKABLE]
    rest = sorted({str(x) for x in b.get("layer_rest", pd.Series(dtype=str)).dropna()})
    lines = ["## Prefill forward (breakable CUDA graphs)", "",
             "The whole prefill forward as SGLang runs it with `--cuda-graph-backend-prefill breakable`: each layer's "
             "work before and after attention replayed from CUDA graph segments, attention launched eagerly between "
             "them (two calls or the fused call). "
             + ("The rest of each layer is the model's own (norms, QKV/O projections, RoPE, and the MLP or MoE "
                "sized by `--tp`/`--ep`). " if rest == ["model"] else
                f"The rest of each layer is {', '.join(rest)} of GPU work per layer (`--layer-rest-us`). ")
             + "Critical path: ranks wait for each other at every layer (K|V all-gather, MoE dispatch), so it is the "
               "sum over layer kinds of the slowest rank (`critical_rule`); the whole-forward maximum is kept as "
               "`speedup_max`. Effect = the share of the two-call forward fusion saves (+) or costs (−) on that path, with the 95 % interval; attention share = the "
               "graph-timed attention forward / this forward (fused); host hidden = every rank issued its forward "
               "faster than the GPU ran it.", "",
             md_table(["backend", "cp", "bs", "tokens", "two-call ms", "fused ms", "fusion on the forward",
                       "attention share", "host", "segments"], rows), ""]
    notes = sorted({str(x) for x in b.get("rest_weights_note", pd.Series(dtype=str)).dropna() if str(x)})
    if any("MXFP4" in n for n in notes):
        dtype = str(b["dtype"].iloc[0]) if "dtype" in b and len(b) else "the activation dtype"
        lines += [MXFP4_LINE.format(dtype=dtype), ""]
    return lines


def _segments(df: pd.DataFrame, c: pd.Series) -> str:
    """How the cell's segments ran (``graph`` or ``eager: why``) and the bucket padding when there was one."""
    rows = df[(df["timing"] == Timing.BREAKABLE)]
    for k in CELL_KEYS:
        if k in df:
            rows = rows[rows[k] == c[k]]
    seg = sorted({str(s) for s in rows.get("segments", pd.Series(dtype=str)).dropna()})
    pad = pd.to_numeric(rows.get("bucket_pad_ratio", pd.Series(dtype=float)), errors="coerce").max()
    text = ", ".join(seg) or "—"
    return text + (f" (bucket ×{pad:.2f})" if math.isfinite(pad) and pad > 1.0 else "")


def cpu_forward_lines(df: pd.DataFrame) -> list[str]:
    """A CPU run's line on its breakable rows (no claim: the segments ran eagerly, without CUDA graphs)."""
    b = df[df["timing"] == Timing.BREAKABLE] if "timing" in df else df.iloc[0:0]
    if b.empty:
        return []
    ok = int((b["status"] == Status.OK).sum())
    rest = b.get("layer_rest", pd.Series(dtype=str))
    left_out = len(rest) > 0 and rest.astype(str).str.match(r"^0(\.0*)? us$").all()  # --layer-rest-us 0
    what = ("the breakable forward's structure with the rest of every layer left out (`--layer-rest-us 0`, the "
            "CPU default: attention between empty segments)" if left_out else
            "the whole forward (the rest of every layer around attention) with its segments eager")
    kinds = "forward_rule" in b and (b["forward_rule"] == "kinds").any()
    how = (" One layer of each kind was timed at a time, the forward estimated from them (layers x time, summed "
           "over kinds: `--forward-layers kinds`, the default; on a GPU that estimate was checked against timing "
           "every layer, `--forward-layers all`)." if kinds else "")
    return ["", f"Breakable forward: {ok} of {len(b)} rows ran {what}, as a CPU has no CUDA graphs: a functional "
            f"check of the path, not a measurement of it.{how}", ""]


@style.styled
def forward_chart(df: pd.DataFrame, out_dir: Path, name: str = "forward",
                  title: str = "fusion's effect on the prefill forward (breakable)") -> list[Path]:
    """One backend's breakable cells: % of the two-call forward the fusion saves (> 0) or costs (< 0) on the
    critical path, with its 95 % interval, against extend tokens per request (log2 x), a line per bs, a
    panel per cp_size; the forward's ms and host exposure in the legend text. ``df`` prepared, one backend.
    Writes a "no data" chart without breakable rows."""
    from cpbench.report.data import cells

    fw = forward_cells(cells(df)) if len(df) else pd.DataFrame()
    fw = fw[fw["status"] == Status.OK] if len(fw) else fw
    if fw.empty:
        return style.empty_chart(out_dir, name, title, "no breakable forward in this run (--timing breakable)")
    cps = sorted(set(fw["cp_size"]))
    fig, axes = style.new_figure(1, len(cps), height_in=3.4, sharey=True)
    fig.suptitle(f"{title}\n{EFFECT_UNIT} on the layer-synchronised critical path")
    colors = style.bs_colors(fw["bs"])
    for ax, cp in zip(axes.ravel(), cps):
        v = fw[fw["cp_size"] == cp]
        for bs, g in v.groupby("bs", sort=True):
            g = g.sort_values("max_extend_len")
            y = g["saved_pct"].to_numpy(float)
            lo = np.clip(np.nan_to_num(y - g["saved_pct_low"].to_numpy(float)), 0, None)
            hi = np.clip(np.nan_to_num(g["saved_pct_high"].to_numpy(float) - y), 0, None)
            exposed = ~g["host_hidden"].map(flag).to_numpy(bool)
            ax.errorbar(g["max_extend_len"].to_numpy(float), y, yerr=np.vstack([lo, hi]), color=colors[bs],
                        marker="o", capsize=2.5, elinewidth=1, label=f"bs {bs}")
            if exposed.any():
                ax.scatter(g["max_extend_len"].to_numpy(float)[exposed], y[exposed], s=90, facecolors="none",
                           edgecolors=colors[bs], linewidths=1.2)
        ax.axhline(0, color="#555555", lw=0.8)
        ax.set_title(f"cp {cp}")
        style.log2_xaxis(ax, v["max_extend_len"])
    axes.ravel()[0].set_ylabel(EFFECT_UNIT)
    handles, labels = axes.ravel()[0].get_legend_handles_labels()  # a line per bs, as drawn
    axes.ravel()[0].legend(handles + [style.whisker_handle(style.WHISKERS_CI)], labels + [style.WHISKERS_CI],
                           fontsize=7, title="ring: host exposed", title_fontsize=7)
    return style.save(fig, out_dir, name)


FORWARD_CHART = ("forward", forward_chart, "fusion's effect on the prefill forward (breakable CUDA graphs)",
                 "The share of the two-call prefill forward the fusion saves (+) or costs (−) on the layer-synchronised "
                 "critical path, whiskers: 95 % interval, a line per bs; a ring marks a cell whose host issued the "
                 "forward slower than the GPU ran it.")


def summary(rows: pd.DataFrame, view: pd.DataFrame, cpu: bool) -> list[str]:
    """The study's lines in a report's summary: the "Prefill forward" section (GPU), or the CPU's one line."""
    return cpu_forward_lines(rows) if cpu else forward_section(view, rows)


def lead_charts(rows: pd.DataFrame, cpu: bool) -> tuple:
    """The ``forward`` chart, first in a (model, backend) group with breakable rows (none on a CPU)."""
    ran = not cpu and len(rows) and "timing" in rows and (rows["timing"] == Timing.BREAKABLE).any()
    return (FORWARD_CHART,) if ran else ()


REPORT = StudyReport(Timing.BREAKABLE, summary=summary, lead_charts=lead_charts)
