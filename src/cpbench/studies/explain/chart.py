"""``cpbench explain``'s chart: kernel time of each profiled layer, stacked by call and kernel, two-call
vs fused (one bar per mode; prev, next and combined attention kernels plus split-KV merges)."""

from __future__ import annotations

from pathlib import Path

from cpbench.domain.modes import MODES
from cpbench.report.style import PALETTE, new_figure, no_data, save, styled

SEGMENT_COLORS = {"prev": PALETTE[0], "next": PALETTE[1], "combined": PALETTE[3]}
MERGE_COLOR = "#999999"


@styled
def explain_chart(rep: dict, out_dir: Path, name: str = "explain") -> list[Path]:
    """Stacked bars (µs) per mode from the report's call rows; writes ``<name>.png`` and ``.svg`` in
    ``out_dir`` and returns their paths."""
    fig, axes = new_figure(height_in=3.2)
    ax = axes.flat[0]
    rows = rep.get("calls", [])
    if not rows:
        no_data(ax)
        return save(fig, out_dir, name)
    modes = list(MODES)
    seen_labels = set()
    for x, mode in enumerate(modes):
        bottom = 0.0
        for r in [r for r in rows if r["mode"] == mode]:
            kind = "full" if r["window_left"] < 0 else f"win{r['window_left'] + 1}"
            for part, us, color in ((r["call"], r["duration"] or 0.0, SEGMENT_COLORS.get(r["call"], PALETTE[2])),
                                    ("merge", r["merge_us"], MERGE_COLOR)):
                if us <= 0:
                    continue
                label = part if part not in seen_labels else None
                seen_labels.add(part)
                ax.bar(x, us, bottom=bottom, color=color, edgecolor="white", width=0.55, label=label)
                if us > 0.06 * max(1e-9, sum(q["total_us"] for q in rows if q["mode"] == mode)):
                    ax.text(x, bottom + us / 2, f"L{r['layer']} {kind}\n{us:.0f}", ha="center", va="center", fontsize=8)
                bottom += us
        ax.text(x, bottom, f"{bottom:.0f} µs", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel("kernel time (µs, ncu)")
    ax.set_title(f"{rep['model']} {rep['backend']} cp{rep['cp_size']} bs{rep['bs']} extend{rep['max_extend_len']} "
                 f"rank {rep['rank']}: kernel time by call")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return save(fig, out_dir, name)
