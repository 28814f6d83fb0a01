"""The example backend: ``torch.nn.functional.scaled_dot_product_attention`` over cpbench's paged KV cache, one
segment at a time, in fp32. A backend for small cells (the CPU's): it shows the protocol, not a fast path.

What every backend does (cpbench docs/backends.md): ``prepare(work, mode)`` builds, outside any timed region,
what one forward needs (the calls of ``mode``, the page table they read, cache slots, output buffers) and returns
a ``Prepared`` whose closures only compute. The semantics are cpbench's (docs/design.md section 1): bottom-right
causal mask, inclusive ``window_left``, GQA, and fp32 sinks that add ``exp(sink_h)`` once to every softmax
denominator of head ``h``.

``NoSinksBackend`` is the same backend with the sinks left out: deliberately wrong, for
``cpbench check-backend cpbench_plugin_example.backend:NoSinksBackend`` to catch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cpbench.kernels.backends.base import (Prepared, Stopwatch, call_rows, calls_and_table, layer_tables,
                                           output_buffers, row_ranges, swa_table)
from cpbench.kernels.kv import token_slots

ROWS = 128  # query rows per SDPA call: bounds the [Hq, rows, kv_len] mask a long segment needs


def _mask(rows: range, q_len: int, kv_len: int, window_left: int, device) -> torch.Tensor:
    """Additive fp32 mask ``[len(rows), kv_len]``: 0 where query row ``i`` (at position ``kv_len - q_len + i``)
    may attend key ``j`` (``j <= pos`` and, with a window, ``j >= pos - window_left``), else -inf."""
    pos = torch.arange(rows.start, rows.stop, device=device)[:, None] + (kv_len - q_len)
    keys = torch.arange(kv_len, device=device)[None, :]
    allowed = keys <= pos
    if window_left >= 0:
        allowed &= keys >= pos - window_left
    return torch.zeros(allowed.shape, device=device).masked_fill_(~allowed, float("-inf"))


def _attend(q, k, v, q_len: int, window_left: int, sinks, out) -> None:
    """One segment: ``q`` ``[q_len, Hq, D]``, ``k``/``v`` ``[kv_len, Hkv, D]`` (any float dtype), ``sinks`` ``[Hq]``
    fp32 or None; writes ``out`` ``[q_len, Hq, D]``."""
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[2]
    kv_len = k.shape[0]
    kf = k.float().transpose(0, 1).repeat_interleave(hq // hkv, dim=0)  # [Hq, kv_len, D]: GQA, head h -> h // g
    vf = v.float().transpose(0, 1).repeat_interleave(hq // hkv, dim=0)
    if sinks is not None:  # one zero key per head whose score is the sink logit: exp(sink) joins the denominator
        kf = torch.cat([kf, kf.new_zeros(hq, 1, d)], dim=1)
        vf = torch.cat([vf, vf.new_zeros(hq, 1, d)], dim=1)
    for lo in range(0, q_len, ROWS):
        rows = range(lo, min(q_len, lo + ROWS))
        mask = _mask(rows, q_len, kv_len, window_left, q.device).expand(hq, len(rows), kv_len)
        if sinks is not None:
            mask = torch.cat([mask, sinks.float().view(hq, 1, 1).expand(hq, len(rows), 1)], dim=-1)
        qf = q[rows.start:rows.stop].float().transpose(0, 1)  # [Hq, rows, D]
        o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=d ** -0.5)
        out[rows.start:rows.stop].copy_(o.transpose(0, 1))


class SdpaBackend:
    """Backend ``example``: one SDPA per segment (and per block of ``ROWS`` query rows), in fp32."""

    name = "example"
    use_sinks = True

    def supports(self, device: torch.device, model, dtype: torch.dtype) -> str | None:
        """None: SDPA runs on every device torch does, in fp32, bf16 and fp16 (computed in fp32)."""
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return f"{self.name} takes fp32, bf16 or fp16, not {dtype}"
        return None

    def prepare(self, work, mode: str) -> Prepared:
        """Every layer's calls of ``mode`` (two-call: ``prev`` and ``next``; fused: ``combined``) over the page
        table they read (the fused call's row-duplicated one), the window layers' over the SWA pool's table when
        the cell has one."""
        sw = Stopwatch(work.q.device)
        with sw("page_table"):
            calls, table = calls_and_table(work, mode)  # [bs, W] or the fused call's [2*bs, W]
        tables = layer_tables(work, table, swa_table(work, mode, sw))  # window_left -> the table its layers read
        ps = work.cell.page_size
        with sw("metadata"):
            q_all, row_order = call_rows(work, calls)  # queries in call order (fused_order may reorder them)
            slots = {}  # id(table) -> per call, per segment: int64 [kv_len] slots of the flat cache
            for t in tables.values():
                slots.setdefault(id(t), [[token_slots(t[s.table_row], s.kv_len, ps) for s in segs]
                                         for _, segs in calls])
        with sw("outputs"):
            outputs = output_buffers(work)  # window_left -> [tokens_logical, Hq, D], written by the last layer
        sinks = work.cell.sinks if self.use_sinks else None
        layers = []
        for i, w in enumerate(work.model.window_left_per_layer):
            k_cache, v_cache = work.cell.layer_kv(i)  # [num_pages, page_size, Hkv, D] each
            layers.append([(name, self._call(segs, call_slots, rows, w, sinks, k_cache, v_cache, q_all, outputs[w]))
                           for (name, segs), call_slots, rows in zip(calls, slots[id(tables[w])], row_ranges(calls))])
        return Prepared(layers, outputs, sw.us, kernel_patterns=(), setup_mem=sw.mem, row_order=row_order)

    @staticmethod
    def _call(segs, call_slots, rows, window_left, sinks, k_cache, v_cache, q_all, out):
        """The closure of one attention call: its segments one after another, rows ``rows`` of ``q_all``."""
        k_flat = k_cache.view(-1, *k_cache.shape[-2:])  # [num_pages * page_size, Hkv, D]
        v_flat = v_cache.view(-1, *v_cache.shape[-2:])
        plan, start = [], rows[0]
        for s, idx in zip(segs, call_slots):
            plan.append((start, s.q_len, idx))
            start += s.q_len

        def call() -> None:
            for lo, q_len, idx in plan:
                _attend(q_all[lo:lo + q_len], k_flat.index_select(0, idx), v_flat.index_select(0, idx), q_len,
                        window_left, sinks, out[lo:lo + q_len])

        return call


class NoSinksBackend(SdpaBackend):
    """Deliberately wrong: :class:`SdpaBackend` without the sinks (a model with sinks comes out wrong)."""

    name = "example-no-sinks"
    use_sinks = False
