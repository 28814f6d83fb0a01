"""Torch reference attention over the paged cache: runs anywhere (CPU or CUDA), fp32 accumulation.

Semantics (DESIGN.md §1): bottom-right-aligned causal mask (query i of a segment sits at position
``kv_len - q_len + i``), inclusive ``window_left`` (key >= pos - window_left), GQA (q head h reads kv
head ``h // (Hq // Hkv)``), and per-head fp32 sinks that add ``exp(sink_h)`` once to every softmax
denominator. Scale ``head_dim ** -0.5``.
"""

from __future__ import annotations

import torch

from cpbench.bench.backends.base import Prepared, Stopwatch, output_buffers, row_ranges
from cpbench.bench.geometry import Segment
from cpbench.bench.kv import token_slots
from cpbench.bench.models import ModelSpec
from cpbench.bench.workload import CellInputs, RankWork

# Bound on one fp32 score block (bytes); larger segments are split along the query rows.
SCORE_BLOCK_BYTES = 256 << 20


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window_left: int = -1,
           sinks: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Reference attention of one segment.

    Args:
        q: ``[q_len, Hq, D]`` queries (any float dtype); the segment's last query is the last key.
        k, v: ``[kv_len, Hkv, D]`` keys and values, ``kv_len >= q_len``.
        window_left: -1 for full causal, else each query sees keys ``[pos - window_left, pos]``.
        sinks: ``[Hq]`` fp32 sink logits, or None.
        out: optional ``[q_len, Hq, D]`` destination (written in its dtype).
    Returns:
        ``[q_len, Hq, D]`` in ``q.dtype`` (or ``out``).
    """
    q_len, hq, d = q.shape
    kv_len, hkv, _ = k.shape
    group = hq // hkv
    scale = d ** -0.5
    if out is None:
        out = torch.empty_like(q)
    kf = k.float().permute(1, 0, 2).unsqueeze(1)  # kf: [Hkv, 1, kv_len, D]
    vf = v.float().permute(1, 0, 2).unsqueeze(1)  # vf: [Hkv, 1, kv_len, D]
    keys = torch.arange(kv_len, device=q.device)
    step = max(1, SCORE_BLOCK_BYTES // (4 * hq * kv_len))
    for lo in range(0, q_len, step):
        hi = min(q_len, lo + step)
        qf = q[lo:hi].float().view(hi - lo, hkv, group, d).permute(1, 2, 0, 3)  # [Hkv, g, n, D]
        s = torch.matmul(qf, kf.transpose(-1, -2)) * scale  # s: [Hkv, g, n, kv_len] fp32
        pos = torch.arange(kv_len - q_len + lo, kv_len - q_len + hi, device=q.device)[:, None]
        allowed = keys[None, :] <= pos
        if window_left >= 0:
            allowed &= keys[None, :] >= pos - window_left
        s = s.masked_fill(~allowed, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)  # m: [Hkv, g, n, 1]
        if sinks is not None:
            sink = sinks.float().view(hkv, group, 1, 1)
            m = torch.maximum(m, sink)
        p = torch.exp(s - m)
        denom = p.sum(dim=-1, keepdim=True)
        if sinks is not None:
            denom = denom + torch.exp(sink - m)
        o = torch.matmul(p, vf) / denom  # o: [Hkv, g, n, D]
        out[lo:hi].copy_(o.permute(2, 0, 1, 3).reshape(hi - lo, hq, d))
    return out


def gather_kv(cache: torch.Tensor, block_row: torch.Tensor, kv_len: int, page_size: int) -> torch.Tensor:
    """First ``kv_len`` tokens of one page-table row from a ``[num_pages, page_size, Hkv, D]`` cache,
    as ``[kv_len, Hkv, D]``."""
    flat = cache.view(-1, cache.shape[-2], cache.shape[-1])
    return flat.index_select(0, token_slots(block_row, kv_len, page_size))


def reference_call(work: RankWork, segments: list[Segment], rows: tuple[int, int], window_left: int,
                   kv: tuple[torch.Tensor, torch.Tensor], table: torch.Tensor, out: torch.Tensor) -> None:
    """One attention call over ``segments`` (eagerly), writing local rows ``rows`` of ``out``."""
    ps = work.cell.page_size
    r = rows[0]
    for s in segments:
        k = gather_kv(kv[0], table[s.table_row], s.kv_len, ps)
        v = gather_kv(kv[1], table[s.table_row], s.kv_len, ps)
        attend(work.q[r:r + s.q_len], k, v, window_left, work.cell.sinks, out[r:r + s.q_len])
        r += s.q_len


class TorchBackend:
    """The reference as a backend: one call = a loop over its segments (attention *calls* are what
    it counts; it launches many small kernels per call on CUDA)."""

    name = "torch"

    def supports(self, device: torch.device, model: ModelSpec) -> str | None:
        return None

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        from cpbench.bench.kv import duplicate_block_tables

        sw = Stopwatch()
        with sw("metadata"):
            calls = work.geometry.calls(mode)
            ranges = row_ranges(calls)
        with sw("page_table"):
            fused = any(name == "combined" for name, _ in calls) and work.geometry.cp_size > 1
            table = duplicate_block_tables(work.cell.block_tables) if fused else work.cell.block_tables
        outputs = output_buffers(work)
        layers = []
        for i, w in enumerate(work.model.window_left_per_layer):
            kv = work.cell.kv_buffers[work.cell.layer_buffer[i]]
            layers.append([(name, _bind(work, segs, rr, w, kv, table, outputs[w]))
                           for (name, segs), rr in zip(calls, ranges)])
        return Prepared(layers, outputs, sw.us, kernel_patterns=())


def _bind(work, segs, rows, w, kv, table, out):
    return lambda: reference_call(work, segs, rows, w, kv, table, out)


def sequence_reference(cell: CellInputs, request: int, layer: int) -> torch.Tensor:
    """Non-CP causal attention of layer ``layer`` over a whole request (prefix included):
    ``[extend_len, Hq, D]``, the ground truth every rank's rows must match in token order."""
    window_left = cell.model.window_left_per_layer[layer]
    e, p = cell.extend_lens[request], cell.prefix_lens[request]
    kv = cell.kv_buffers[cell.layer_buffer[layer]]
    row = cell.block_tables[request]
    k = gather_kv(kv[0], row, e + p, cell.page_size)
    v = gather_kv(kv[1], row, e + p, cell.page_size)
    q = cell.q_all[cell.q_offsets[request]:cell.q_offsets[request] + e]
    return attend(q, k, v, window_left, cell.sinks)
