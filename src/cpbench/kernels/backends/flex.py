"""FlexAttention backend: the three points of the zigzag line on one kernel family.

PyTorch's FlexAttention (``torch.nn.attention.flex_attention``, compiled on CUDA) runs the same cell as

* ``two-call``: a ``prev`` call over the bs prev blocks, then a ``next`` call over the bs next blocks;
* ``fused``: one call over the 2*bs segments, each reading its row of the row-duplicated page table
  (SGLang PR #33137);
* ``cp-native``: one call over the rank's bs requests, each query carrying its global position in its request
  (prev block, then next block), over the request's own unduplicated page-table row: no synthetic batch and
  no duplicated table.

A call is dense over its rows: ``q [B, Hq, Q, D]`` (a row is a segment, or a request for cp-native; shorter rows
padded and masked), and its keys are read from the paged pool through each row's page-table row inside the
forward (``index_select`` of the row's cache slots: the paged read a varlen kernel does in its loads). A
segment reads ``kv_len`` keys, so two-call and fused read a request's prev keys twice (once for prev, once
inside next), cp-native once. The mask (``mask_mod``) is causal at each query's position, ``kv < kv_len``,
and ``kv >= pos - window_left`` on window layers; every value it reads is a tensor, so one compiled kernel
serves every layer kind and no closure constant is baked into a kernel built for another mask. Sinks are
folded in from the log-sum-exp FlexAttention returns: ``out * sigmoid(lse - sink)`` adds ``exp(sink)`` to
each softmax denominator, as the other backends do (docs/design.md §1).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from cpbench.domain.geometry import Segment
from cpbench.domain.modes import Mode
from cpbench.domain.models import ModelSpec
from cpbench.kernels.backends.base import Prepared, Stopwatch, calls_and_table, layer_tables, output_buffers, swa_table
from cpbench.kernels.backends.registry import get_spec
from cpbench.kernels.kv import token_slots
from cpbench.kernels.workload import RankWork

try:  # torch >= 2.9 returns the log-sum-exp through an AuxRequest (return_lse is deprecated there)
    from torch.nn.attention.flex_attention import AuxRequest as _AUX
except ImportError:  # pragma: no cover - older torch
    _AUX = None

RECOMPILE_LIMIT = 256  # compiled shapes of FlexAttention per process before dynamo would give up
# Queries of a compiled call are padded to a multiple of this: on the H200 (torch 2.11) the compiled kernel has no
# config for a query length that is not a multiple of its 128-row block (inductor's NoValidChoicesError for 125
# or 37 queries; any key length works). Padding queries see nothing, and the block mask skips their blocks.
CUDA_Q_ALIGN = 128
NO_WINDOW = 1 << 30  # window_left of a full layer, as the mask reads it (a tensor, like a window's)


@dataclass
class FlexCall:
    """One FlexAttention call over ``B`` rows, its tensors built at prepare.

    Attributes:
        q: ``[B, Hq, Q, D]`` the rows' queries (padding rows zero).
        q_pos: int64 ``[B, Q]`` key position each query sits at (-1: padding, sees nothing).
        kv_len: int64 ``[B]`` keys of each row; slots: int64 ``[B, K]`` the cache slot of each key (padding: 0).
        dest: int64 ``[n]`` local output row of each real query, in ``(b, q)`` order; take: int64 ``[n]`` its
            index in the flattened ``[B * Q]`` rows.
    """

    q: torch.Tensor
    q_pos: torch.Tensor
    kv_len: torch.Tensor
    slots: torch.Tensor
    dest: torch.Tensor
    take: torch.Tensor


def _segment_rows(work: RankWork) -> dict[tuple[str, int], int]:
    """Local row of the first query of each ``(part, request)`` block (prev blocks, then next blocks)."""
    g, start, row = work.geometry, {}, 0
    for s in g.prev_segments() + g.next_segments():
        start[(s.part, s.request)] = row
        row += s.q_len
    return start


def build_call(work: RankWork, rows: list[list[tuple[Segment, int]]], table: torch.Tensor,
               q_align: int = 1) -> FlexCall:
    """The tensors of one call whose row ``b`` holds the query blocks ``rows[b]`` (``(segment, first local
    row)``; one block for a segment, prev then next for a cp-native request) reading keys through
    ``table[segment.table_row]`` (every block of a row reads the same row and the longest ``kv_len``). The
    query length is padded up to a multiple of ``q_align`` (:data:`CUDA_Q_ALIGN` for a compiled call)."""
    dev, ps = work.q.device, work.cell.page_size
    qmax = -(-max(sum(s.q_len for s, _ in blocks) for blocks in rows) // q_align) * q_align
    kmax = max(max(s.kv_len for s, _ in blocks) for blocks in rows)
    B, hq, d = len(rows), work.q.shape[1], work.q.shape[2]
    q = work.q.new_zeros(B, qmax, hq, d)
    q_pos = torch.full((B, qmax), -1, dtype=torch.int64, device=dev)
    slots = torch.zeros(B, kmax, dtype=torch.int64, device=dev)
    kv_len = torch.zeros(B, dtype=torch.int64, device=dev)
    dest, take = [], []
    for b, blocks in enumerate(rows):
        at = 0
        for s, first in blocks:
            q[b, at:at + s.q_len] = work.q[first:first + s.q_len]
            q_pos[b, at:at + s.q_len] = torch.arange(s.kv_len - s.q_len, s.kv_len, device=dev)
            dest += range(first, first + s.q_len)
            take += range(b * qmax + at, b * qmax + at + s.q_len)
            at += s.q_len
        n = max(s.kv_len for s, _ in blocks)
        kv_len[b] = n
        slots[b, :n] = token_slots(table[blocks[0][0].table_row], n, ps)
    as_long = dict(dtype=torch.int64, device=dev)
    return FlexCall(q.transpose(1, 2).contiguous(), q_pos, kv_len, slots, torch.tensor(dest, **as_long),
                    torch.tensor(take, **as_long))


def mode_rows(work: RankWork, mode: str) -> list[tuple[str, list[list[tuple[Segment, int]]]]]:
    """The calls of one layer as ``(name, rows)``: two-call ``prev`` and ``next`` (a row per segment), fused
    ``combined`` (a row per segment of the 2*bs, in the run's fused order), cp-native ``combined`` (a row per
    request: its prev block, then its next block; at cp_size 1 a request is one block, and cp-native is the one
    call that every mode makes there)."""
    start = _segment_rows(work)
    if mode == Mode.CP_NATIVE:
        g = work.geometry
        nxt = {n.request: n for n in g.next_segments()}
        return [("combined", [[(p, start[("prev", p.request)])]
                              + ([(nxt[p.request], start[("next", p.request)])] if p.request in nxt else [])
                              for p in g.prev_segments()])]
    calls = work.geometry.calls(mode, work.fused_order)
    return [(name, [[(s, start[(s.part, s.request)])] for s in segs]) for name, segs in calls]


class FlexBackend:
    """FlexAttention in the three modes (two-call, fused, cp-native): what the call structure buys on one kernel
    family. Compiled (``torch.compile``) on CUDA, eager elsewhere (a functional check)."""

    name = "flex"

    def __init__(self, q_align: int | None = None) -> None:
        """``q_align``: pad each call's queries to a multiple of this (default :data:`CUDA_Q_ALIGN` on CUDA, 1
        elsewhere)."""
        self._flex = None
        self._q_align = q_align

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError:
            return f"torch {torch.__version__} has no torch.nn.attention.flex_attention (torch >= 2.5 has)"
        if model.num_q_heads % model.num_kv_heads:
            return f"{model.num_q_heads} q heads are not a multiple of {model.num_kv_heads} kv heads"
        return None

    def first_use_note(self, dtype: torch.dtype) -> str | None:
        return ("flex: FlexAttention compiles a kernel per call shape on first use (seconds per cell, outside "
                "the timed region)")

    def _kernel(self, device: torch.device):
        if self._flex is None:
            from torch.nn.attention.flex_attention import flex_attention

            if device.type == "cuda":
                # one kernel per (rows, queries, keys) shape, as a static-shape engine build would have (dynamic
                # shapes measured slower on the H200); every rank and call has its own shape, so the recompile
                # limit is raised: past it dynamo would fall back to the unfused eager FlexAttention, which
                # materialises every score, part-way through a sweep
                import torch._dynamo

                torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
                self._flex = torch.compile(flex_attention, dynamic=False)
            else:  # eager FlexAttention (a functional check); torch warns once that it is not compiled
                warnings.filterwarnings("ignore", message=".*flex_attention.*", category=UserWarning)
                self._flex = flex_attention
        return self._flex

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """Metadata = each call's padded queries, key positions and cache slots, and one block mask per call and
        layer kind; page_table = the duplicated table (fused, cp > 1; cp-native never duplicates). Raises
        CpbenchInputError for an ineligible rank."""
        from torch.nn.attention.flex_attention import create_block_mask

        sw = Stopwatch(work.q.device)
        dev = work.q.device
        base_mode = Mode.TWO_CALL if mode == Mode.CP_NATIVE else mode
        with sw("page_table"):
            _, table = calls_and_table(work, base_mode)
        swa = swa_table(work, base_mode, sw)
        tables = layer_tables(work, table, swa)
        align = self._q_align or (CUDA_Q_ALIGN if dev.type == "cuda" else 1)
        with sw("metadata"):
            named = mode_rows(work, mode)
            built = {}  # (call index, id(table)) -> FlexCall
            for w, t in tables.items():
                for i, (_, rows) in enumerate(named):
                    if (i, id(t)) not in built:  # layer kinds reading one table share its calls' tensors
                        built[(i, id(t))] = build_call(work, rows, t, align)
            masks = {}
            for w, t in tables.items():
                for i in range(len(named)):
                    c = built[(i, id(t))]
                    masks[(i, w)] = create_block_mask(_mask_mod(c, w), c.q.shape[0], None, c.q.shape[2],
                                                      c.slots.shape[1], device=dev)
        with sw("outputs"):
            outputs = output_buffers(work)
        flex, sinks = self._kernel(dev), work.cell.sinks
        layers = []
        for layer, w in enumerate(work.model.window_left_per_layer):
            kv = work.cell.layer_kv(layer)
            layers.append([(name, _call(flex, built[(i, id(tables[w]))], masks[(i, w)], kv, sinks, outputs[w]))
                           for i, (name, _) in enumerate(named)])
        return Prepared(layers, outputs, sw.us, kernel_patterns=get_spec("flex").kernel_patterns, setup_mem=sw.mem,
                        held=[] if swa is None else [swa])


def _mask_mod(c: FlexCall, window_left: int):
    """Causal at each query's position, within the row's keys, and within ``window_left`` (a tensor)."""
    window = torch.tensor(window_left if window_left >= 0 else NO_WINDOW, dtype=torch.int64, device=c.q_pos.device)
    q_pos, kv_len = c.q_pos, c.kv_len

    def mask(b, h, q_idx, kv_idx):
        pos = q_pos[b, q_idx]
        return (kv_idx <= pos) & (kv_idx < kv_len[b]) & (kv_idx >= pos - window)

    return mask


def _attend(flex, q, k, v, block_mask):
    """FlexAttention's output and log-sum-exp (``return_aux`` where torch has it, else ``return_lse``)."""
    if _AUX is not None:
        o, aux = flex(q, k, v, block_mask=block_mask, enable_gqa=True, return_aux=_AUX(lse=True))
        return o, aux.lse
    return flex(q, k, v, block_mask=block_mask, enable_gqa=True, return_lse=True)


def fold_sinks(o: torch.Tensor, lse: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """Fold attention sinks into FlexAttention's output, in place: ``o *= sigmoid(lse - sink)``.

    ``sigmoid(lse - sink) = exp(lse) / (exp(lse) + exp(sink))`` rescales each row as if ``exp(sink)`` had been
    in its softmax denominator (the sink semantics of the other backends, docs/design.md §1).

    Args:
        o: ``[B, Hq, Q, D]`` the call's output (bf16, fp16 or fp32), rescaled in place.
        lse: fp32 ``[B, Hq, Q]`` its log-sum-exp (natural log). sink: fp32 ``[1, Hq, 1]`` per-head sink logits.

    The factor stays fp32 and the product is rounded to ``o``'s dtype once, in one elementwise kernel (an
    in-place multiply by an fp32 tensor computes in fp32). ``o`` itself was already rounded by the kernel, so
    the folded output carries two roundings; the check allows for the second (domain/tolerance.py). Rounding
    the factor to bf16 first added a third, up to 2^-9 of ``|o|`` (on an H200, rank 0 of bs 16 x 2K: 0.0205
    against 0.0152 without it). Returns ``o``.
    """
    return o.mul_(torch.sigmoid(lse - sink).unsqueeze(-1))


def _call(flex, c: FlexCall, block_mask, kv: tuple[torch.Tensor, torch.Tensor], sinks: torch.Tensor | None,
          out: torch.Tensor):
    """One call: read each row's keys through its cache slots, attend, fold the sinks in, write the real rows."""
    k_flat = kv[0].view(-1, kv[0].shape[-2], kv[0].shape[-1])  # [num_pages * page_size, Hkv, D]
    v_flat = kv[1].view(-1, kv[1].shape[-2], kv[1].shape[-1])
    B, K = c.slots.shape
    hq, qlen, d = c.q.shape[1], c.q.shape[2], c.q.shape[3]
    flat_slots = c.slots.view(-1)
    sink = sinks.float().view(1, hq, 1) if sinks is not None else None
    out_flat = out.view(out.shape[0], hq, d)

    def call() -> None:
        k = k_flat.index_select(0, flat_slots).view(B, K, -1, d).transpose(1, 2)  # [B, Hkv, K, D]
        v = v_flat.index_select(0, flat_slots).view(B, K, -1, d).transpose(1, 2)
        o, lse = _attend(flex, c.q, k, v, block_mask)  # o: [B, Hq, Q, D], lse: [B, Hq, Q] fp32
        if sink is not None:
            fold_sinks(o, lse, sink)
        rows = o.transpose(1, 2).reshape(B * qlen, hq, d)
        out_flat.index_copy_(0, c.dest, rows.index_select(0, c.take))

    return call
