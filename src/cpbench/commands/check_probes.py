"""The small cells ``cpbench check-backend`` runs a backend on (commands/check_backend.py): one plain causal cell, then
one cell per feature a backend can get wrong alone (a cached prefix, sinks, a sliding window, the SWA pool's own
page table), then everything together at cp 4, as gpt-oss runs it. When the plain cell passes and a feature's cell
fails, that feature is what the backend gets wrong (:func:`diagnosis`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbench.domain.models import ModelSpec, get_preset, with_overrides

WINDOW = 8  # tokens: a window shorter than the segments, so it masks keys a causal mask alone would keep


@dataclass(frozen=True)
class Probe:
    """One check cell: ``name``, ``what`` it exercises beyond the plain cell, ``hint`` (where to look when it alone
    fails), the CP size, one batch (``extend`` and ``prefix`` tokens per request), and the model's features."""

    name: str
    what: str
    hint: str
    cp: int
    extend: tuple[int, ...]
    prefix: tuple[int, ...] = (0, 0)
    sinks: bool = False
    window: int = 0  # 0: every layer full; else GPT-OSS's alternation, window first
    swa_pool: bool = False

    def model(self) -> ModelSpec:
        """A 2-layer GQA model (8 q heads, 2 kv heads, head_dim 64, page size 16) with this probe's features."""
        return with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=64,
                              page_size=16, window=self.window, sinks=self.sinks)


BASE = Probe("causal", "bottom-right causal mask, GQA, paged cache, two requests of uneven length, cp 2",
             "the plain cell fails: check the causal mask (aligned to the bottom right of each segment), q head h "
             "reading kv head h // (Hq / Hkv), the scale head_dim**-0.5, and the page table's slots", 2, (40, 23))
PROBES: tuple[Probe, ...] = (
    BASE,
    Probe("prefix", "a cached prefix: queries sit after prefix tokens (kv_len > q_len), pages partly filled",
          "wrong only with a cached prefix: query i of a segment is at position kv_len - q_len + i", 2, (40, 23),
          prefix=(24, 9)),
    Probe("sinks", "fp32 per-head sinks", "wrong only with sinks: exp(sink_h) is added once to every softmax "
          "denominator of head h and adds no value (docs/design.md §1)", 2, (40, 23), sinks=True),
    Probe("window", f"a sliding-window layer (window {WINDOW}, window_left {WINDOW - 1}) beside a full one",
          f"wrong only with a window: a query at position p sees keys p - window_left .. p (inclusive; window_left "
          f"= {WINDOW - 1} here); full layers have window_left -1", 2, (40, 23), window=WINDOW),
    Probe("swa pool", "window layers read their own pool through its own page table (--swa-pool)",
          "wrong only with an SWA pool: window layers read work.cell.layer_kv(i) through the SWA table "
          "(base.swa_table / base.layer_tables)", 2, (40, 23), window=WINDOW, swa_pool=True),
    Probe("cp 4, all", "everything at cp 4: prefix, sinks, window, 2 requests", "wrong only at cp 4 with all "
          "features: check the zigzag blocks' kv lengths and the fused call's segment order", 4, (64, 29),
          prefix=(17, 0), sinks=True, window=WINDOW),
)


def diagnosis(failed: list[str]) -> list[str]:
    """What to look at, given the names of the probes that failed: the plain cell's hint when it failed; else the
    hint of each one-feature cell that failed; else, when only the last cell (every feature at cp 4) failed, its
    hint."""
    if BASE.name in failed:
        return [BASE.hint]
    alone = [p.hint for p in PROBES[1:-1] if p.name in failed]
    return alone or [p.hint for p in PROBES[-1:] if p.name in failed]
