"""Zigzag context-parallel prefill geometry, on plain ints (no torch).

Every formula follows SGLang's zigzag CP (``layers/cp/zigzag.py`` build_metadata and
``layers/utils/cp_utils.py``), restated in docs/design.md §1:

* each request's extend tokens are cut into ``S = 2 * cp_size`` blocks, ``base, rem = divmod(L, S)``,
  block ``b`` holds ``base + 1`` tokens if ``b < rem`` else ``base``;
* rank ``r`` owns block ``r`` ("prev") and block ``S - 1 - r`` ("next") of every request;
  local token order is all prev blocks (request 0..bs-1), then all next blocks;
* ``kv_len_prev = prefix + sum(blk[0..r])``, ``kv_len_next = prefix + sum(blk[0..S-1-r])``;
* the fused call (SGLang PR #33137) runs one synthetic batch of ``2 * bs`` segments, prev then next.

Lengths are in tokens. ``cp_size == 1`` means no CP: one segment per request (the "prev" segments),
no "next" segments, and both modes issue the same single call per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Sequence

from cpbench.domain.modes import Mode
from cpbench.domain.eligibility import DEFAULT_RULE, CpRule
from cpbench.errors import CpbenchInputError


@dataclass(frozen=True)
class Segment:
    """One attention segment: ``q_len`` query rows of request ``request`` that start at extend offset
    ``q_start`` and attend to the first ``kv_len`` keys of that request (prefix included).
    ``table_row`` is the row of the page table the segment reads (``request`` in two-call;
    ``request`` or ``bs + request`` in the fused, row-duplicated table)."""

    request: int
    q_start: int
    q_len: int
    kv_len: int
    table_row: int
    part: str = "prev"  # "prev" or "next" block of its request


def _cu(xs: Sequence[int]) -> list[int]:
    return [0, *accumulate(xs)]


@dataclass(frozen=True)
class RankGeometry:
    """Per-rank zigzag metadata with SGLang's field names. Lists are per request, in tokens.

    ``cu_seqlens_*`` are the int32 prefix sums ``[0] + cumsum(...)`` (here Python ints). When the batch
    is not CP-eligible every per-request field is empty and ``reason`` says why.
    """

    cp_size: int
    rank: int
    eligible: bool
    reason: str
    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    actual_seq_q_prev: tuple[int, ...] = ()
    actual_seq_q_next: tuple[int, ...] = ()
    kv_len_prev: tuple[int, ...] = ()
    kv_len_next: tuple[int, ...] = ()
    q_start_prev: tuple[int, ...] = ()
    q_start_next: tuple[int, ...] = ()
    tokens_padded: int = 0

    # --- two-call fields -------------------------------------------------------------------------
    @property
    def bs(self) -> int:
        return len(self.extend_lens)

    @property
    def cu_seqlens_q_prev(self) -> list[int]:
        return _cu(self.actual_seq_q_prev)

    @property
    def cu_seqlens_q_next(self) -> list[int]:
        return _cu(self.actual_seq_q_next)

    @property
    def cu_seqlens_kv_prev(self) -> list[int]:
        return _cu(self.kv_len_prev)

    @property
    def cu_seqlens_kv_next(self) -> list[int]:
        return _cu(self.kv_len_next)

    @property
    def max_seqlen_q_prev(self) -> int:
        return max(self.actual_seq_q_prev, default=0)

    @property
    def max_seqlen_q_next(self) -> int:
        return max(self.actual_seq_q_next, default=0)

    # --- fused (PR #33137) fields ----------------------------------------------------------------
    @property
    def actual_seq_q_combined(self) -> list[int]:
        return [*self.actual_seq_q_prev, *self.actual_seq_q_next]

    @property
    def kv_len_combined(self) -> list[int]:
        return [*self.kv_len_prev, *self.kv_len_next]

    @property
    def cu_seqlens_q_combined(self) -> list[int]:
        return _cu(self.actual_seq_q_combined)

    @property
    def cu_seqlens_kv_combined(self) -> list[int]:
        return _cu(self.kv_len_combined)

    @property
    def max_seqlen_q_combined(self) -> int:
        return max(self.actual_seq_q_combined, default=0)

    # --- token counts ----------------------------------------------------------------------------
    @property
    def tokens_logical(self) -> int:
        """Real query rows on this rank (prev + next), tokens."""
        return sum(self.actual_seq_q_prev) + sum(self.actual_seq_q_next)

    @property
    def max_kv_len(self) -> int:
        return max(self.kv_len_combined, default=0)

    # --- attention calls -------------------------------------------------------------------------
    def prev_segments(self, table_offset: int = 0) -> list[Segment]:
        return [Segment(s, self.q_start_prev[s], self.actual_seq_q_prev[s], self.kv_len_prev[s], table_offset + s)
                for s in range(len(self.actual_seq_q_prev))]

    def next_segments(self, table_offset: int = 0) -> list[Segment]:
        return [Segment(s, self.q_start_next[s], self.actual_seq_q_next[s], self.kv_len_next[s],
                        table_offset + s, "next")
                for s in range(len(self.actual_seq_q_next))]

    def calls(self, mode: str, fused_order: str = "prev-next") -> list[tuple[str, list[Segment]]]:
        """The attention calls of one layer: ``[(name, segments), ...]``.

        ``mode`` is ``Mode.TWO_CALL`` (``prev`` over table rows 0..bs-1, then ``next`` over the same rows)
        or ``"fused"`` (one ``combined`` call over 2*bs segments, segment ``i`` reading row ``i`` of the
        duplicated table). ``fused_order`` orders the fused segments (:data:`FUSED_ORDERS`):
        ``prev-next`` (SGLang PR #33137: prev ++ next, next segments read rows bs..2bs-1 of
        ``cat(t, t)``), ``next-prev`` (next ++ prev) or ``interleaved`` (prev 0, next 0, prev 1, ...,
        reading ``t.repeat_interleave(2, 0)``). With ``cp_size == 1`` both modes are one
        ``combined`` call over bs segments. Two-call and prev-next query rows are consecutive in local
        token order; other orders permute them (``Prepared.row_order``).

        Raises:
            CpbenchInputError: unknown mode or order, or the batch is not CP-eligible.
        """
        if not self.eligible:
            raise CpbenchInputError(f"rank {self.rank} is not CP-eligible: {self.reason}")
        if self.cp_size == 1:
            return [("combined", self.prev_segments())]
        if mode == Mode.TWO_CALL:
            return [("prev", self.prev_segments()), ("next", self.next_segments())]
        if mode == Mode.FUSED:
            return [("combined", fused_segment_order(self.prev_segments(), self.next_segments(), fused_order))]
        raise CpbenchInputError(f"unknown mode {mode!r}: use 'two-call' or 'fused'")

    def to_json(self) -> dict:
        """The `cpbench geometry --json` object for this rank (a fixed key set: tools parse it).
        ``eligible`` says whether SGLang runs the batch with CP: false at ``cp_size == 1`` ("no CP": SGLang
        builds no CP strategy), with every metadata field null."""
        ok = self.eligible and self.cp_size > 1
        return {
            "rank": self.rank,
            "eligible": ok,
            "reason": self.reason,
            "actual_seq_q_prev": list(self.actual_seq_q_prev) if ok else None,
            "actual_seq_q_next": list(self.actual_seq_q_next) if ok else None,
            "kv_len_prev": list(self.kv_len_prev) if ok else None,
            "kv_len_next": list(self.kv_len_next) if ok else None,
            "cu_seqlens_q_combined": self.cu_seqlens_q_combined if ok else None,
            "cu_seqlens_kv_combined": self.cu_seqlens_kv_combined if ok else None,
            "max_seqlen_q_combined": self.max_seqlen_q_combined if ok else None,
        }


FUSED_ORDERS = ("prev-next", "next-prev", "interleaved")


def fused_segment_order(prev: list[Segment], nxt: list[Segment], fused_order: str = "prev-next") -> list[Segment]:
    """The fused call's segments in ``fused_order``, each with ``table_row`` = its position (the row
    it reads in the duplicated table, :func:`cpbench.kernels.kv.duplicate_block_tables`).

    Raises:
        CpbenchInputError: an order not in :data:`FUSED_ORDERS`.
    """
    return [replace(s, table_row=i) for i, s in enumerate(in_fused_order(prev, nxt, fused_order))]


def in_fused_order(prev: list, nxt: list, fused_order: str = "prev-next") -> list:
    """The items of the prev and next calls (segments, lengths, labels, ...) as the fused batch orders
    them: ``prev-next`` (SGLang PR #33137's prev ++ next), ``next-prev``, or ``interleaved`` (prev 0,
    next 0, prev 1, ...).

    Raises:
        CpbenchInputError: an order not in :data:`FUSED_ORDERS`.
    """
    if fused_order == "prev-next":
        return prev + nxt
    if fused_order == "next-prev":
        return nxt + prev
    if fused_order == "interleaved":
        return [x for pair in zip(prev, nxt) for x in pair]
    raise CpbenchInputError(f"unknown --fused-order {fused_order!r}: use one of {', '.join(FUSED_ORDERS)}")


def block_sizes(extend_len: int, cp_size: int) -> list[int]:
    """Zigzag block sizes of one request: ``2 * cp_size`` blocks, the first ``extend_len % (2C)``
    one token longer (SGLang zigzag.py: no per-request padding). Tokens."""
    n_blocks = 2 * cp_size
    base, rem = divmod(extend_len, n_blocks)
    return [base + 1 if b < rem else base for b in range(n_blocks)]


def validate_batch(extend_lens: Sequence[int], prefix_lens: Sequence[int] | None, cp_size: int,
                   rank: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check a batch description; return ``(extend_lens, prefix_lens)`` as tuples.

    Raises:
        CpbenchInputError: empty batch, a length < 1 (extend) or < 0 (prefix), extend and prefix
            lists of different lengths, ``cp_size < 1``, or ``rank`` outside ``[0, cp_size)``.
    """
    if isinstance(cp_size, bool) or not isinstance(cp_size, int) or cp_size < 1:
        raise CpbenchInputError(f"cp_size must be an integer >= 1, got {cp_size!r}")
    ext = tuple(int(x) for x in extend_lens)
    if not ext:
        raise CpbenchInputError("the batch is empty: give at least one extend length, e.g. --extend 4096")
    if any(x < 1 for x in ext):
        raise CpbenchInputError(f"extend lengths must be >= 1 token, got {list(ext)}")
    pre = tuple(int(x) for x in prefix_lens) if prefix_lens is not None else (0,) * len(ext)
    if len(pre) != len(ext):
        raise CpbenchInputError(
            f"{len(ext)} extend lengths but {len(pre)} prefix lengths: give one prefix per request")
    if any(p < 0 for p in pre):
        raise CpbenchInputError(f"prefix lengths must be >= 0 tokens, got {list(pre)}")
    if rank is not None and not 0 <= rank < cp_size:
        raise CpbenchInputError(f"rank {rank} is outside [0, cp_size={cp_size}): pick 0..{cp_size - 1}")
    return ext, pre


def eligibility(extend_lens: Sequence[int], cp_size: int, rule: CpRule | None = None) -> tuple[bool, str]:
    """Whether SGLang would run this batch with CP under ``rule`` (default: PR #33137's, every extend
    length >= 2 * cp_size; :mod:`cpbench.domain.eligibility`), and why not. ``cp_size == 1`` is
    ``(True, "no CP ...")``: a plain prefill, one segment per request."""
    return (rule or DEFAULT_RULE).check(extend_lens, cp_size)


def rank_geometry(extend_lens: Sequence[int], prefix_lens: Sequence[int] | None, cp_size: int,
                  rank: int, rule: CpRule | None = None) -> RankGeometry:
    """Zigzag metadata of one rank (SGLang zigzag.py build_metadata; docs/design.md §1).

    Args:
        extend_lens: new tokens per request, each >= 1.
        prefix_lens: cached prefix tokens per request (``seq_len - extend_len``), or None for 0s.
        cp_size: CP size C >= 1.
        rank: 0 <= rank < C.
        rule: the eligibility rule (default PR #33137's, :func:`eligibility`).
    Returns:
        RankGeometry; ``tokens_padded`` is SGLang's per-rank padded row count,
        ``ceil(max_r tokens_r / 2C) * 2C`` (pad_logical_token_to_physical).
    Raises:
        CpbenchInputError: see :func:`validate_batch`.
    """
    ext, pre = validate_batch(extend_lens, prefix_lens, cp_size, rank)
    ok, reason = eligibility(ext, cp_size, rule)
    base = dict(cp_size=cp_size, rank=rank, eligible=ok, reason=reason, extend_lens=ext, prefix_lens=pre)
    if not ok:
        return RankGeometry(**base)
    if cp_size == 1:
        return RankGeometry(**base, actual_seq_q_prev=ext, actual_seq_q_next=(),
                            kv_len_prev=tuple(e + p for e, p in zip(ext, pre)), kv_len_next=(),
                            q_start_prev=(0,) * len(ext), q_start_next=(), tokens_padded=sum(ext))
    n_blocks = 2 * cp_size
    nxt = n_blocks - 1 - rank
    q_prev, q_next, kv_prev, kv_next, st_prev, st_next = [], [], [], [], [], []
    for e, p in zip(ext, pre):
        blk = block_sizes(e, cp_size)
        cum = _cu(blk)  # cum[b] = tokens before block b
        q_prev.append(blk[rank])
        q_next.append(blk[nxt])
        st_prev.append(cum[rank])
        st_next.append(cum[nxt])
        kv_prev.append(p + cum[rank + 1])
        kv_next.append(p + cum[nxt + 1])
    return RankGeometry(**base, actual_seq_q_prev=tuple(q_prev), actual_seq_q_next=tuple(q_next),
                        kv_len_prev=tuple(kv_prev), kv_len_next=tuple(kv_next),
                        q_start_prev=tuple(st_prev), q_start_next=tuple(st_next),
                        tokens_padded=padded_tokens_per_rank(ext, cp_size))


def padded_tokens_per_rank(extend_lens: Sequence[int], cp_size: int) -> int:
    """Every rank's physical row count: ``ceil(max_r tokens_r / 2C) * 2C`` (SGLang
    pad_logical_token_to_physical). Tokens."""
    n_blocks = 2 * cp_size
    per_rank = [0] * cp_size
    for e in extend_lens:
        blk = block_sizes(e, cp_size)
        for r in range(cp_size):
            per_rank[r] += blk[r] + blk[n_blocks - 1 - r]
    top = max(per_rank)
    return -(-top // n_blocks) * n_blocks


def all_ranks(extend_lens: Sequence[int], prefix_lens: Sequence[int] | None,
              cp_size: int, rule: CpRule | None = None) -> list[RankGeometry]:
    """:func:`rank_geometry` for every rank ``0..cp_size-1``."""
    return [rank_geometry(extend_lens, prefix_lens, cp_size, r, rule) for r in range(cp_size)]


def attended_pairs(q_len: int, kv_len: int, window_left: int = -1) -> int:
    """Number of (query, key) pairs a bottom-right-aligned causal segment attends.

    Query i sits at position ``kv_len - q_len + i`` and sees keys ``[max(0, pos - window_left), pos]``
    (``window_left < 0``: no window). Without a window this is ``q*kv - q*(q-1)/2`` (docs/design.md §4).
    """
    if q_len <= 0:
        return 0
    if q_len > kv_len:
        raise CpbenchInputError(f"segment has q_len {q_len} > kv_len {kv_len}")
    lo, hi = kv_len - q_len, kv_len - 1  # query positions, inclusive

    def tri(a: int, b: int) -> int:  # sum of (p + 1) for p in [a, b]
        return 0 if b < a else (b - a + 1) * (a + b + 2) // 2

    if window_left < 0:
        return tri(lo, hi)
    split = min(hi, window_left - 1)  # positions < window_left see p + 1 keys, others window_left + 1
    full = tri(lo, split)
    rest = max(0, hi - max(lo, window_left) + 1)
    return full + rest * (window_left + 1)


def attention_flops(segments: Sequence[Segment], num_q_heads: int, head_dim: int,
                    window_left: int = -1) -> int:
    """FLOPs of one attention call: ``4 * Hq * D * pairs`` summed per segment (QK^T and PV, 2 FLOPs
    per MAC), from the per-segment (window-aware) causal area, never from max lengths (docs/design.md §4)."""
    return sum(4 * num_q_heads * head_dim * attended_pairs(s.q_len, s.kv_len, window_left)
               for s in segments)
