"""The chart of the line: two-call, fused and cp-native per cell on one kernel family (studies/line/view.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from cpbench.domain.modes import Mode, Timing
from cpbench.report import style
from cpbench.report.style import MODE_COLOR, MODE_MARKER, human_tokens
from cpbench.report.tables import HOST_MARK
from cpbench.results.critical_path import flag
from cpbench.studies.line.view import line_view
from cpbench.results.verdicts import saved_share

CPU_GREY = "0.45"  # a CPU's ratios: no speedup claim, no verdict colour


@style.styled
def line_chart(rows: pd.DataFrame, out_dir: Path, name: str, title: str, cpu: bool = False) -> list[Path]:
    """The share of the two-call time fused and cp-native save on the critical path (two-call = 0; the report's
    notation, :func:`cpbench.results.verdicts.saved_share` of each speedup) with their 95 % intervals, one point per
    cell, a panel per timing (a host-bound eager cell: its GPU-time ratio, open marker); the cells'
    duplicated page-table bytes under the x labels. With ``cpu`` (a functional check, not a benchmark): the
    latency ratios uncoloured (grey, one marker per mode), without interval or host-bound mark: a CPU run makes no
    speedup claim. Returns the PNG and SVG paths."""
    line = line_view(rows)
    if line.empty:
        return style.empty_chart(out_dir, name, title, "no cp-native row ran")
    timings = sorted(set(line["timing"]))
    fig, axes = style.new_figure(1, len(timings), height_in=3.2, sharey=True)
    fig.suptitle(title)
    for ax, t in zip(axes[0], timings):
        sub = line[line["timing"] == t].sort_values(["cp_size", "bs", "max_extend_len"])
        x = list(range(len(sub)))
        ax.axhline(0.0, color=CPU_GREY if cpu else MODE_COLOR[Mode.TWO_CALL], lw=1.2, label=f"{Mode.TWO_CALL} (= 0)")
        for k, (mode, col) in enumerate(((Mode.FUSED, "fused_vs_two_call"), (Mode.CP_NATIVE, "native_vs_two_call"))):
            v = _pct(sub[col])
            lo = _pct(sub.get(f"{col}_ci_low", sub[col])).fillna(v)
            hi = _pct(sub.get(f"{col}_ci_high", sub[col])).fillna(v)
            # a host-bound eager cell: its GPU-time ratio, an open marker without interval (the host set its latency)
            host = sub.get(f"{col}_host_bound", pd.Series(False, index=sub.index)).map(flag).astype(bool)
            host &= sub["timing"].eq(Timing.EAGER)
            xs = pd.Series([i + (k - 0.5) * 0.18 for i in x], index=sub.index)
            if cpu:  # no claim: the points alone, in grey
                ax.plot(xs, v, ls="", marker=MODE_MARKER[mode], color=CPU_GREY, label=str(mode))
                continue
            gpu = _pct(sub[f"{col}_gpu"]) if f"{col}_gpu" in sub else v
            v, lo, hi = v.where(~host, gpu), lo.where(~host, gpu), hi.where(~host, gpu)
            ax.errorbar(xs[~host], v[~host], yerr=[(v - lo).clip(lower=0)[~host], (hi - v).clip(lower=0)[~host]],
                        ls="", capsize=3, marker=MODE_MARKER[mode], color=MODE_COLOR[mode], label=str(mode))
            if host.any():
                ax.plot(xs[host], v[host], ls="", marker=MODE_MARKER[mode], color=MODE_COLOR[mode],
                        markerfacecolor="white", label=f"{mode}: GPU time {HOST_MARK}")
        labels = []
        for _, r in sub.iterrows():
            mem = r.get("page_table_fused_bytes", math.nan)
            table = f"\ntable {style.human_bytes(mem)} vs 0" if isinstance(mem, float) and math.isfinite(mem) else ""
            labels.append(f"cp {int(r['cp_size'])} · bs {int(r['bs'])}\n{human_tokens(r['max_extend_len'])}{table}")
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_title(f"{t} timing")
        ax.set_ylabel("saves, % of two-call time")
    handles, labels = axes[0, 0].get_legend_handles_labels()  # the modes as drawn, then what the whiskers are
    if not cpu:  # a CPU's points carry no interval
        handles, labels = handles + [style.whisker_handle(style.WHISKERS_CI)], labels + [style.WHISKERS_CI]
    axes[0, 0].legend(handles, labels, fontsize=7, loc="best")
    return style.save(fig, out_dir, name)


def _pct(ratios) -> pd.Series:
    """Speedups over two-call (a column) as the share of the two-call time they save, in percent."""
    return pd.Series([100 * saved_share(x) for x in pd.to_numeric(ratios, errors="coerce")], index=ratios.index,
                     dtype=float)
