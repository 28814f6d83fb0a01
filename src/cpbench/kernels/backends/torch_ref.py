"""Torch reference attention over the paged cache: runs anywhere (CPU or CUDA), fp32 accumulation.

Semantics (docs/design.md §1): bottom-right-aligned causal mask (query i of a segment sits at position
``kv_len - q_len + i``), inclusive ``window_left`` (key >= pos - window_left), GQA (q head h reads kv
head ``h // (Hq // Hkv)``), and per-head fp32 sinks that add ``exp(sink_h)`` once to every softmax
denominator. Scale ``head_dim ** -0.5``.

Two implementations of the same math: :func:`attend_reference` (explicit fp32 matmul / mask / exp,
the correctness gate's ground truth, src/cpbench/kernels/check.py) and :func:`attend_sdpa` (fp32
``scaled_dot_product_attention`` with an additive causal/window mask). :func:`attend` picks one:
SDPA on CPU (0.25-0.27 s against 0.67-1.09 s per forward on one thread, 2.5-4.2x, at cp 4, bs 1, 512
tokens of gpt-oss-120b, measured with benchmarks/cpu_reference.py on a 2-core machine:
docs/evidence/cpu-reference.jsonl; the explicit path's time varies most between runs), the reference
elsewhere (SDPA is not measured on CUDA).
"""

from __future__ import annotations

import functools
from itertools import accumulate

import torch
import torch.nn.functional as F

from cpbench.kernels.backends.base import (Prepared, Stopwatch, call_rows, calls_and_table, layer_tables,
                                           output_buffers, row_ranges, swa_table)
from cpbench.kernels.backends.registry import get_spec
from cpbench.domain.geometry import Segment
from cpbench.kernels.kv import token_slots
from cpbench.domain.models import ModelSpec
from cpbench.kernels.workload import CellInputs, RankWork

# Bound on one fp32 score block (bytes) of attend_reference; larger segments are split along the query rows.
SCORE_BLOCK_BYTES = 256 << 20
# attend_sdpa: query rows per SDPA call (each call reads only the keys its rows see, so a smaller block computes
# less of the causal / window triangle and then masks it: per forward at cp 4, 512 tokens of gpt-oss-120b, one
# thread, 16 and 32 measured equal, 8 ~4% and 64 ~10% slower), and the multiple its key count is rounded up to
# (the CPU flash kernel measured up to ~20% slower per key on other counts, e.g. 143 keys vs 144; ~5% per forward).
SDPA_ROW_BLOCK = 16
SDPA_KEY_ALIGN = 16


METHODS = ("auto", "sdpa", "reference")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window_left: int = -1,
           sinks: torch.Tensor | None = None, out: torch.Tensor | None = None,
           method: str = "auto") -> torch.Tensor:
    """Attention of one segment, or of ``n`` segments of equal shape at once (see
    :func:`attend_reference` for the arguments). ``method``: ``"reference"`` (:func:`attend_reference`),
    ``"sdpa"`` (:func:`attend_sdpa`) or ``"auto"``: SDPA on CPU, where it measured faster on every
    shape tried (benchmarks/cpu_reference.py), the reference on other devices."""
    if method == "auto":
        method = "sdpa" if q.device.type == "cpu" else "reference"
    if method == "sdpa":
        return attend_sdpa(q, k, v, window_left, sinks, out)
    if method == "reference":
        return attend_reference(q, k, v, window_left, sinks, out)
    raise ValueError(f"unknown attention method {method!r}: use one of {', '.join(METHODS)}")


def attend_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window_left: int = -1,
                     sinks: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Reference attention of one segment, or of ``n`` segments of equal shape at once.

    Args:
        q: ``[q_len, Hq, D]`` (or ``[n, q_len, Hq, D]``) queries; the last query is the last key.
        k, v: ``[kv_len, Hkv, D]`` (or ``[n, kv_len, Hkv, D]``), ``kv_len >= q_len``.
        window_left: -1 for full causal, else each query sees keys ``[pos - window_left, pos]``.
        sinks: ``[Hq]`` fp32 sink logits, or None.
        out: optional destination shaped like ``q`` (written in its dtype).
    Returns:
        Attention output shaped like ``q``, in ``q.dtype`` (or ``out``).
    """
    if q.dim() == 3:
        o = attend_reference(q[None], k[None], v[None], window_left, sinks, None if out is None else out[None])
        return o[0]
    n, q_len, hq, d = q.shape
    kv_len, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = d ** -0.5
    if out is None:
        out = torch.empty_like(q)
    first = max(0, kv_len - q_len - window_left) if window_left >= 0 else 0  # keys before it are masked
    kf = k[:, first:].float().permute(0, 2, 1, 3).unsqueeze(2)  # kf: [n, Hkv, 1, kv', D]
    vf = v[:, first:].float().permute(0, 2, 1, 3).unsqueeze(2)  # vf: [n, Hkv, 1, kv', D]
    keys = torch.arange(first, kv_len, device=q.device)
    step = max(1, SCORE_BLOCK_BYTES // (4 * n * hq * (kv_len - first)))
    sink = sinks.float().view(1, hkv, group, 1, 1) if sinks is not None else None
    for lo in range(0, q_len, step):
        hi = min(q_len, lo + step)
        qf = q[:, lo:hi].float().reshape(n, hi - lo, hkv, group, d).permute(0, 2, 3, 1, 4)  # [n, Hkv, g, m, D]
        s = torch.matmul(qf, kf.transpose(-1, -2)) * scale  # s: [n, Hkv, g, m, kv'] fp32
        pos = torch.arange(kv_len - q_len + lo, kv_len - q_len + hi, device=q.device)[:, None]
        allowed = keys[None, :] <= pos
        if window_left >= 0:
            allowed &= keys[None, :] >= pos - window_left
        s = s.masked_fill(~allowed, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)  # m: [n, Hkv, g, m, 1]
        if sink is not None:
            m = torch.maximum(m, sink)
        p = torch.exp(s - m)
        denom = p.sum(dim=-1, keepdim=True)
        if sink is not None:
            denom = denom + torch.exp(sink - m)
        o = torch.matmul(p, vf) / denom  # o: [n, Hkv, g, m, D]
        out[:, lo:hi].copy_(o.permute(0, 3, 1, 2, 4).reshape(n, hi - lo, hq, d))
    return out


# CPU flash kernel that also returns the log-sum-exp (what F.scaled_dot_product_attention runs on CPU);
# with it sinks are a cheap rescale instead of a per-head mask (which makes SDPA ~4x slower).
_CPU_FLASH_LSE = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attend_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window_left: int = -1,
                sinks: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`attend_reference`'s attention (same arguments and result, to fp32 rounding) through fp32
    ``scaled_dot_product_attention`` with an additive 0 / -inf mask for causal + window.

    Query rows are taken in blocks of ``SDPA_ROW_BLOCK`` and each block reads only the keys its rows
    can see (``[pos_lo - window_left, pos_hi]``), so little of the causal / window triangle is computed
    and then masked; the key range is widened to a multiple of ``SDPA_KEY_ALIGN`` (extra keys masked).
    GQA: the ``g = Hq / Hkv`` query heads that share a KV head are stacked along the query rows, so SDPA
    sees ``Hkv`` heads of ``g * rows`` rows (the mask repeats per stacked head; :func:`_block_mask`).
    K / V are converted to fp32 once per call, q block by block, each in one copy.
    Sinks: on CPU, where the flash kernel's log-sum-exp ``L`` is available, the sink-free output is
    rescaled by ``1 / (1 + exp(sink_h - L)) = sigmoid(L - sink_h)`` (= adding ``exp(sink_h)`` to the
    denominator); elsewhere one extra zero-valued key/value is appended whose mask entry is the sink
    logit (its score is ``0 + sink_h``, so it adds ``exp(sink_h)`` to the denominator and nothing to the
    numerator).
    """
    if q.dim() == 3:
        o = attend_sdpa(q[None], k[None], v[None], window_left, sinks, None if out is None else out[None])
        return o[0]
    n, q_len, hq, d = q.shape
    kv_len, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    scale = d ** -0.5
    if out is None:
        out = torch.empty_like(q)
    align = SDPA_KEY_ALIGN
    # keys before `first` are never read (visible ones start at kv_len - q_len - window_left; widening adds < align)
    first = max(0, kv_len - q_len - window_left - (align - 1)) if window_left >= 0 else 0
    # kf, vf: [n, Hkv, kv_len - first, D] fp32, contiguous (one converting copy each)
    kf = k[:, first:].transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
    vf = v[:, first:].transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
    q_heads = q.view(n, q_len, hkv, g, d).permute(0, 2, 3, 1, 4)  # [n, Hkv, g, q_len, D] views
    out_heads = out.view(n, q_len, hkv, g, d).permute(0, 2, 3, 1, 4)
    lse_op = _CPU_FLASH_LSE if q.device.type == "cpu" else None
    sink = sinks.float().view(hkv, g, 1, 1) if sinks is not None else None
    for lo in range(0, q_len, SDPA_ROW_BLOCK):
        hi = min(q_len, lo + SDPA_ROW_BLOCK)
        m = hi - lo
        p_lo, p_hi = kv_len - q_len + lo, kv_len - q_len + hi  # absolute positions of rows lo, hi
        a = max(0, p_lo - window_left) if window_left >= 0 else 0  # first key a row of the block sees
        width = -(-(p_hi - a) // align) * align
        a = max(0, p_hi - width)  # keys [a, b): widened to the left, else to the right (masked either way)
        b = min(kv_len, a + width)
        mask = _block_mask(m, b - a, b - p_lo, window_left, g, q.device)  # [g * m, b - a]
        # qf: [n, Hkv, g * m, D] fp32, row (j, i) = query lo + i of head kv_head * g + j
        qf = q.new_empty((n, hkv, g, m, d), dtype=torch.float32).copy_(q_heads[:, :, :, lo:hi]).view(n, hkv, g * m, d)
        kb, vb = kf[:, :, a - first:b - first], vf[:, :, a - first:b - first]
        if sink is None:
            o = F.scaled_dot_product_attention(qf, kb, vb, attn_mask=mask, scale=scale)
        elif lse_op is not None:
            o, lse = lse_op(qf, kb, vb, attn_mask=mask, scale=scale)  # lse: [n, Hkv, g * m], natural log
            o.view(n, hkv, g, m, d).mul_(torch.sigmoid(lse.view(n, hkv, g, m, 1) - sink))
        else:  # sum + exp(sink) = exp(lse) (1 + exp(sink - lse)) needs the LSE: use a zero key instead
            zero = kb.new_zeros(n, hkv, 1, d)
            kb, vb = torch.cat([kb, zero], dim=2), torch.cat([vb, zero], dim=2)
            sink_col = sink.view(hkv, g, 1, 1).expand(hkv, g, m, 1).reshape(hkv, g * m, 1)
            mask = torch.cat([mask.expand(hkv, -1, -1), sink_col], dim=-1)  # [Hkv, g * m, b - a + 1]
            o = F.scaled_dot_product_attention(qf, kb, vb, attn_mask=mask, scale=scale)
        out_heads[:, :, :, lo:hi].copy_(o.view(n, hkv, g, m, d))  # o: [n, Hkv, g * m, D] -> rows lo:hi of out
    return out


def _block_mask(rows: int, cols: int, right: int, window_left: int, repeat: int,
                device: torch.device) -> torch.Tensor:
    """Additive fp32 mask ``[repeat * rows, cols]`` (0 = visible, -inf = masked) of query rows at key
    positions ``cols - right + i`` over keys ``0 .. cols - 1`` (causal, and ``window_left`` if >= 0),
    stacked ``repeat`` times along the rows. The mask depends on a key only through its distance
    from the last key, so it is the last ``cols`` columns of a cached mask of a power-of-two width
    (a strided view; SDPA reads its strides): a forward asks for few distinct ``(rows, right)``."""
    width = max(64, 1 << (cols - 1).bit_length())
    return _right_aligned_mask(rows, width, right, window_left, repeat, device)[:, width - cols:]


@functools.lru_cache(maxsize=256)
def _right_aligned_mask(rows: int, cols: int, right: int, window_left: int, repeat: int,
                        device: torch.device) -> torch.Tensor:
    """:func:`_block_mask` of exactly ``cols`` columns (contiguous, cached)."""
    keys = torch.arange(cols, device=device)
    pos = torch.arange(cols - right, cols - right + rows, device=device)[:, None]
    allowed = keys[None, :] <= pos
    if window_left >= 0:
        allowed &= keys[None, :] >= pos - window_left
    mask = torch.zeros(allowed.shape, device=device).masked_fill_(~allowed, float("-inf"))
    return mask.repeat(repeat, 1)


def gather_kv(cache: torch.Tensor, block_row: torch.Tensor, kv_len: int, page_size: int) -> torch.Tensor:
    """First ``kv_len`` tokens of one page-table row from a ``[num_pages, page_size, Hkv, D]`` cache,
    as ``[kv_len, Hkv, D]``."""
    flat = cache.view(-1, cache.shape[-2], cache.shape[-1])
    return flat.index_select(0, token_slots(block_row, kv_len, page_size))


def _groups(segments: list[Segment]) -> list[list[int]]:
    """Runs of consecutive segments of one part (prev/next) with equal (q_len, kv_len): each run is
    computed as one batched :func:`attend` (uniform batches become one or two runs per call).
    Runs never cross the prev/next boundary, so a segment is computed identically in both modes."""
    runs: list[list[int]] = []
    for i, s in enumerate(segments):
        p = segments[runs[-1][-1]] if runs else None
        if p is not None and (p.part, p.q_len, p.kv_len) == (s.part, s.q_len, s.kv_len):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _call_closure(work: RankWork, segments: list[Segment], slots: list[torch.Tensor], rows: tuple[int, int],
                  window_left: int, kv: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor, q_all: torch.Tensor):
    """One attention call over ``segments``, reading rows ``rows`` of ``q_all`` ``[tokens_logical, Hq, D]``
    (queries in call order) and writing the same rows of ``out``.
    ``slots[i]``: int64 ``[kv_len_i]`` cache slots of segment i (built at prepare)."""
    k_flat = kv[0].view(-1, kv[0].shape[-2], kv[0].shape[-1])  # [num_pages*page_size, Hkv, D]
    v_flat = kv[1].view(-1, kv[1].shape[-2], kv[1].shape[-1])
    sinks, hq, d = work.cell.sinks, work.q.shape[1], work.q.shape[2]
    starts = [rows[0] + c for c in accumulate((s.q_len for s in segments), initial=0)]
    plan = []
    for run in _groups(segments):
        q_len, n = segments[run[0]].q_len, len(run)
        lo = starts[run[0]]
        idx = torch.cat([slots[i] for i in run])  # [n * kv_len] cache slots
        plan.append((lo, q_len, n, idx))

    def call() -> None:
        for lo, q_len, n, idx in plan:
            q = q_all[lo:lo + n * q_len].view(n, q_len, hq, d)  # q: [n, q_len, Hq, D]
            k = k_flat.index_select(0, idx).view(n, -1, *k_flat.shape[1:])  # k: [n, kv_len, Hkv, D]
            v = v_flat.index_select(0, idx).view(n, -1, *v_flat.shape[1:])
            attend(q, k, v, window_left, sinks, out[lo:lo + n * q_len].view(n, q_len, hq, d))

    return call


class TorchBackend:
    """The reference as a backend: one call = a loop over its segments (attention *calls* are what
    it counts; it launches many small kernels per call on CUDA)."""

    name = "torch"

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        return None

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """Metadata = geometry calls + per-segment cache slots of each table read (with ``--swa-pool`` the
        window layers' slots come from the SWA pool's table, and they read its caches); page_table = the
        duplicated table (fused, cp > 1). Raises CpbenchInputError for an ineligible rank or unknown mode."""
        sw = Stopwatch(work.q.device)
        ps = work.cell.page_size
        with sw("page_table"):
            calls, table = calls_and_table(work, mode)
        swa = swa_table(work, mode, sw)
        tables = layer_tables(work, table, swa)
        with sw("metadata"):
            ranges = row_ranges(calls)
            q_all, row_order = call_rows(work, calls)
            slots = {}  # id(table) -> per call, per segment: int64 [kv_len] cache slots
            for t in tables.values():
                if id(t) not in slots:
                    slots[id(t)] = [[token_slots(t[s.table_row], s.kv_len, ps) for s in segs] for _, segs in calls]
        with sw("outputs"):
            outputs = output_buffers(work)
        layers = []
        for i, w in enumerate(work.model.window_left_per_layer):
            kv = work.cell.layer_kv(i)
            layers.append([(name, _call_closure(work, segs, sl, rr, w, kv, outputs[w], q_all))
                           for (name, segs), sl, rr in zip(calls, slots[id(tables[w])], ranges)])
        return Prepared(layers, outputs, sw.us, kernel_patterns=get_spec("torch").kernel_patterns, setup_mem=sw.mem,
                        row_order=row_order, held=[] if swa is None else [swa])


def sequence_reference(cell: CellInputs, request: int, layer: int) -> torch.Tensor:
    """Non-CP causal attention of layer ``layer`` over a whole request (prefix included):
    ``[extend_len, Hq, D]``, the ground truth every rank's rows must match in token order. It reads the
    layer's values through the full pool (``kv_buffers[layer_buffer[layer]]`` by ``block_tables``), also for
    a window layer that reads the SWA pool's copy."""
    window_left = cell.model.window_left_per_layer[layer]
    e, p = cell.extend_lens[request], cell.prefix_lens[request]
    kv = cell.kv_buffers[cell.layer_buffer[layer]]
    row = cell.block_tables[request]
    k = gather_kv(kv[0], row, e + p, cell.page_size)
    v = gather_kv(kv[1], row, e + p, cell.page_size)
    q = cell.q_all[cell.q_offsets[request]:cell.q_offsets[request] + e]
    return attend(q, k, v, window_left, cell.sinks)
