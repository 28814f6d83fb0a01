"""The work split of one attention launch: query tiles, KV tiles, CTAs and waves (pure arithmetic).

No torch: the CLI, the verdict and the tests use it anywhere. Inputs are the segments of one call
(``actual_seq_q`` and ``kv_len`` per segment, tokens), the heads and the kernel's tile sizes; the
output says how the launch falls on the SMs. docs/design.md §9 derives it; the numbers it uses are
FlashInfer's (``include/flashinfer/attention/scheduler.cuh`` and ``hopper/prefill_sm90.cuh``), by FlashInfer's
template name (its ``backend=`` argument, ``fa2`` or ``fa3``: cpbench's ``flashinfer-fa2`` and ``flashinfer-fa3``
backends, :data:`TEMPLATES`; cpbench's ``fa3``, FlashAttention-3, has no model here):

- **fa3** (Hopper, ``PrefillSM90Plan``): one work item per (query head, query tile), ``cta_tile_q``
  = 192 rows for head_dim 64, else 128 (query heads are not packed). The paged kernel's KV tile is
  96 keys for head_dim 64 and 128, 32 for 256. The kernel is persistent: one CTA per SM; the planner
  sorts segments by ``kv_len`` (longest first), walks each segment's tiles from the last, and gives
  each item to the CTA with the least accumulated cost ``2 * cta_tile_q + kv_len_eff`` (causal:
  ``kv_len_eff = kv_len - (tiles after it) * cta_tile_q``; the window is not in the cost).
- **fa2** (``PrefillPlan`` / ``PrefillSplitQOKVIndptr``): query heads of a KV head are packed
  (``packed_qo_len = q_len * Hq / Hkv``); ``cta_tile_q`` = 128 if the average packed length is over
  64 (head_dim < 256), 64 if over 16, else 16. One CTA per (packed tile, KV chunk, KV head). The KV
  chunk (pages) is the smallest one (at least ``128 / page_size`` pages) for which the tiles times
  chunks fit ``2 * SMs / Hkv``; when that chunk is shorter than the longest segment, KV is split and
  a merge kernel follows. CTAs start in launch order on ``SMs * ctas_per_sm`` slots.

Work is counted in KV tiles (``cta_tile_kv`` keys) a CTA visits, causal- and window-aware: the rows
``[a, b)`` of a segment sit at positions ``kv_len - q_len + i`` and need keys
``[max(0, kv_len - q_len + a - window_left), kv_len - q_len + b)``. The makespan (the most tiles on
one SM slot) is the model's kernel time in tile units; it ignores per-tile cost differences
(masking, the epilogue) and the merge kernel's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from cpbench.domain.modes import Mode
from cpbench.domain.geometry import in_fused_order
from cpbench.domain.worksplit_plans import fa2_kv_chunk_pages, fa3_plan, list_schedule
from cpbench.errors import CpbenchInputError

H200_SMS = 132
# cpbench backend -> the FlashInfer template whose work split this module models (``backend`` below)
TEMPLATES = {"flashinfer-fa2": "fa2", "flashinfer-fa3": "fa3"}


@dataclass(frozen=True)
class TileConfig:
    """How one FlashInfer template tiles a launch.

    Attributes:
        backend: FlashInfer's template, ``fa2`` or ``fa3``.
        cta_tile_q: query rows per tile (fa2: packed rows, ``q_row * group + head``).
        cta_tile_kv: keys per inner-loop tile.
        packed_gqa: query heads of one KV head share a tile (fa2) or not (fa3).
        persistent: one CTA per SM walks a planned list of items (fa3), or one CTA per item (fa2).
        ctas_per_sm: resident CTAs per SM assumed by the planner (fa2 2, fa3 1).
    """

    backend: str
    cta_tile_q: int
    cta_tile_kv: int
    packed_gqa: bool
    persistent: bool
    ctas_per_sm: int


def fa2_cta_tile_q(avg_packed_qo_len: int, head_dim: int) -> int:
    """FlashInfer's ``DetermineCtaTileQ`` (compute capability >= 8): 128, 64 or 16 rows."""
    if avg_packed_qo_len > 64 and head_dim < 256:
        return 128
    return 64 if avg_packed_qo_len > 16 else 16


def tile_config(backend: str, head_dim: int, q_lens: Sequence[int], group: int,
                cta_tile_q: int | None = None, cta_tile_kv: int | None = None) -> TileConfig:
    """The documented tile sizes of FlashInfer template ``backend`` (``fa2`` or ``fa3``, :data:`TEMPLATES`) for
    one launch (module doc); ``cta_tile_q`` / ``cta_tile_kv`` override them. ``q_lens``: the launch's
    ``actual_seq_q`` (tokens), ``group`` = Hq / Hkv. Raises CpbenchInputError for any other name (torch,
    trtllm-gen; a cpbench backend name: map it through :data:`TEMPLATES`)."""
    if backend == "fa3":
        tq = cta_tile_q or (192 if head_dim == 64 else 128)
        tk = cta_tile_kv or (32 if head_dim == 256 else 96)
        return TileConfig("fa3", tq, tk, packed_gqa=False, persistent=True, ctas_per_sm=1)
    if backend == "fa2":
        avg = sum(q * group for q in q_lens) // max(len(q_lens), 1)
        # fa2's KV tile is NUM_MMA_KV * 16 keys, chosen at compile time; 64 is an assumption
        return TileConfig("fa2", cta_tile_q or fa2_cta_tile_q(avg, head_dim), cta_tile_kv or 64,
                          packed_gqa=True, persistent=False, ctas_per_sm=2)
    raise CpbenchInputError(f"no tile model for backend {backend!r}: the work split covers FlashInfer's fa2 and fa3 "
                            "templates (cpbench's flashinfer-fa2 and flashinfer-fa3)")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_tiles(q_len: int, kv_len: int, rows: tuple[int, int], tile_kv: int, window_left: int = -1,
             keys: tuple[int, int] | None = None) -> int:
    """KV tiles of ``tile_kv`` keys that query rows ``[a, b)`` of a segment visit (bottom-right
    causal, inclusive ``window_left``; -1 = full). ``keys`` restricts to a KV chunk ``[k0, k1)``.
    Returns 0 when the rows need no key of the chunk."""
    a, b = rows
    lo = kv_len - q_len + a - window_left if window_left >= 0 else 0
    lo, hi = max(0, lo), kv_len - q_len + b
    if keys is not None:
        lo, hi = max(lo, keys[0]), min(hi, keys[1])
    if hi <= lo:
        return 0
    return _cdiv(hi, tile_kv) - lo // tile_kv


@dataclass
class SegmentSplit:
    """One segment of a launch: ``q_tiles`` per head (fa2: per KV head, packed), ``kv_chunks``
    (fa2 split-KV; 1 otherwise), ``ctas`` = work items (q tiles x chunks x heads), ``tile_work`` =
    KV tiles summed over its items."""

    label: str
    q_len: int
    kv_len: int
    q_tiles: int
    kv_chunks: int
    ctas: int
    tile_work: int
    kv_tiles_per_q_tile: list[int] = field(default_factory=list)


@dataclass
class LaunchSplit:
    """One launch: its segments, CTAs, waves and the makespan in KV tiles.

    ``slots`` = SMs x ctas_per_sm; ``waves`` = ctas / slots; ``full_waves`` = ceil(waves);
    ``tail_fill`` = the last wave's share of the slots (1.0 = full); ``makespan_tiles`` = the most KV
    tiles on one slot; ``mean_tiles`` = tile_work / slots (a perfect split); ``split_kv`` and
    ``kv_chunk`` (tokens) for fa2."""

    name: str
    config: TileConfig
    segments: list[SegmentSplit]
    ctas: int
    slots: int
    waves: float
    full_waves: int
    tail_fill: float
    tile_work: int
    makespan_tiles: int
    mean_tiles: float
    split_kv: bool = False
    kv_chunk: int = 0

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "ctas", "slots", "waves", "full_waves", "tail_fill",
                                          "tile_work", "makespan_tiles", "mean_tiles", "split_kv", "kv_chunk")}
        d["config"] = self.config.__dict__
        d["segments"] = [s.__dict__ for s in self.segments]
        return d


def split_launch(name: str, q_lens: Sequence[int], kv_lens: Sequence[int], *, backend: str,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, window_left: int = -1,
                 num_sms: int = H200_SMS, page_size: int = 64, cta_tile_q: int | None = None,
                 cta_tile_kv: int | None = None, labels: Sequence[str] | None = None) -> LaunchSplit:
    """The work split of one attention launch over segments ``(q_lens[i], kv_lens[i])`` (tokens).

    Args:
        name: e.g. ``"prev"``, ``"next"``, ``"fused"``.
        backend: FlashInfer's template, ``fa2`` or ``fa3`` (:func:`tile_config`, :data:`TEMPLATES`); num_sms: SMs
            of the GPU (H200: 132).
        window_left: the layer's window (-1 full); page_size: tokens per page (fa2's KV chunk).
    Raises:
        CpbenchInputError: lengths of different count, a segment with kv_len < q_len, or a
            backend without a tile model.
    """
    if len(q_lens) != len(kv_lens) or any(k < q for q, k in zip(q_lens, kv_lens)):
        raise CpbenchInputError(f"segments need kv_len >= q_len, one each: got q {list(q_lens)}, kv {list(kv_lens)}")
    group = num_q_heads // num_kv_heads
    cfg = tile_config(backend, head_dim, q_lens, group, cta_tile_q, cta_tile_kv)
    labels = list(labels) if labels else [f"{name}[{i}]" for i in range(len(q_lens))]
    tq, tk = cfg.cta_tile_q, cfg.cta_tile_kv
    split, chunk = False, 0
    if cfg.packed_gqa:
        packed = [q * group for q in q_lens]
        pages = [_cdiv(k, page_size) for k in kv_lens]
        split, chunk_pages = fa2_kv_chunk_pages(packed, pages, tq, 2 * num_sms // num_kv_heads,
                                                 max(128 // page_size, 1))
        chunk = chunk_pages * page_size
    segs, items = [], []  # items: (segment index, tiles of work) in launch order for one head
    for i, (q, kv) in enumerate(zip(q_lens, kv_lens)):
        rows_total = q * group if cfg.packed_gqa else q
        n_q = _cdiv(rows_total, tq)
        per_tile, seg_items = [], []
        for t in range(n_q):
            a, b = t * tq, min((t + 1) * tq, rows_total)
            rows = (a // group, (b - 1) // group + 1) if cfg.packed_gqa else (a, b)
            chunks = [(c, min(c + chunk, kv)) for c in range(0, max(kv, 1), chunk)] if split else [None]
            works = [kv_tiles(q, kv, rows, tk, window_left, ch) for ch in chunks]
            per_tile.append(sum(works))
            seg_items.extend(works)
        heads = num_kv_heads if cfg.packed_gqa else num_q_heads
        segs.append(SegmentSplit(labels[i], q, kv, n_q, len(seg_items) // max(n_q, 1), len(seg_items) * heads,
                                 sum(seg_items) * heads, per_tile))
        items.append(seg_items)
    slots = num_sms * cfg.ctas_per_sm
    ctas = sum(s.ctas for s in segs)
    if cfg.persistent:
        loads = fa3_plan(q_lens, kv_lens, items, tq, num_q_heads, num_sms)
    else:
        order = [w for _ in range(num_kv_heads) for seg_items in items for w in seg_items]
        loads = list_schedule(order, slots)
    waves = ctas / slots
    full = _cdiv(ctas, slots)
    tail = (ctas - (full - 1) * slots) / slots if ctas else 0.0
    work = sum(s.tile_work for s in segs)
    return LaunchSplit(name, cfg, segs, ctas, slots, round(waves, 4), full, round(tail, 4), work,
                       max(loads, default=0), round(work / slots, 2), split, chunk)


def fused_segments(q_prev: Sequence[int], kv_prev: Sequence[int], q_next: Sequence[int], kv_next: Sequence[int],
                   fused_order: str = "prev-next") -> tuple[list[int], list[int], list[str]]:
    """``(actual_seq_q, kv_len, labels)`` of the fused launch in ``fused_order`` (``prev-next``: SGLang
    PR #33137's prev ++ next; ``next-prev``; ``interleaved``: prev 0, next 0, prev 1, ...)."""
    prev = [(q, k, f"prev[{s}]") for s, (q, k) in enumerate(zip(q_prev, kv_prev))]
    nxt = [(q, k, f"next[{s}]") for s, (q, k) in enumerate(zip(q_next, kv_next))]
    segs = in_fused_order(prev, nxt, fused_order)
    return [s[0] for s in segs], [s[1] for s in segs], [s[2] for s in segs]


def split_rank(q_prev: Sequence[int], kv_prev: Sequence[int], q_next: Sequence[int], kv_next: Sequence[int], *,
               fused_order: str = "prev-next", tiles: dict[str, tuple[int, int]] | None = None,
               **kw) -> dict[str, LaunchSplit]:
    """The three launches of one rank and layer kind: ``{"prev", "next", "fused"}`` -> :class:`LaunchSplit`.
    ``tiles``: launch name -> ``(cta_tile_q, cta_tile_kv)`` measured for that launch (e.g. read from the
    kernel's name), overriding the defaults; ``kw`` as for :func:`split_launch` (backend, heads,
    head_dim, window_left, num_sms, ...)."""
    q_f, kv_f, labels = fused_segments(q_prev, kv_prev, q_next, kv_next, fused_order)
    tiles = tiles or {}
    launches = {"prev": (q_prev, kv_prev, [f"prev[{s}]" for s in range(len(q_prev))]),
                "next": (q_next, kv_next, [f"next[{s}]" for s in range(len(q_next))]),
                Mode.FUSED: (q_f, kv_f, labels)}
    out = {}
    for name, (q, kv, lab) in launches.items():
        tq, tk = tiles.get(name, (None, None))
        out[name] = split_launch(name, q, kv, labels=lab, cta_tile_q=tq, cta_tile_kv=tk, **kw)
    return out
