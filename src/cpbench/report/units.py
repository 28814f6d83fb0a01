"""How the report writes token counts, byte sizes and the fused effect's unit (``1K``, ``1.5 MiB``,
:data:`EFFECT_UNIT`): shared by the charts
(:mod:`cpbench.report.style`) and the text (tables, sections, the console summary), which therefore import no
plotting library.
"""

from __future__ import annotations

import math

EFFECT_UNIT = "fused saves, % of two-call time"
"""The unit of every fused-vs-two-call effect, as a table's column and a chart's axis name it: the signed share of
the two-call time the fused path saves (``cpbench.results.verdicts.effect_text``: ``+0.7 % [+0.1, +1.4]``)."""


def human_tokens(v: float) -> str:
    """1024 -> '1K', 131072 -> '128K', 1536 -> '1.5K', 100 -> '100'."""
    v = float(v)
    for div, suf in ((1 << 20, "M"), (1 << 10, "K")):
        if v >= div:
            q = v / div
            return f"{q:.0f}{suf}" if q == int(q) else f"{q:.1f}{suf}"
    return f"{v:.0f}"


def human_bytes(v: float) -> str:
    """Bytes as B/KiB/MiB/GiB with 3 significant digits; NaN -> '—'."""
    if v is None or not math.isfinite(float(v)):
        return "—"
    v = float(v)
    for div, suf in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(v) >= div:
            return f"{v / div:.3g} {suf}"
    return f"{v:.0f} B"
