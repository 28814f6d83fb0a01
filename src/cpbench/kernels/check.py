"""Correctness gate: a backend's outputs against the fp32 torch reference, on sampled rows.

For each segment the first and last ``rows_per_end`` query rows are checked (all rows of short
segments). Rows ``[a, b)`` of a segment ``(q_len, kv_len)`` are themselves the segment
``(b - a, kv_len - q_len + b)``, so the reference needs no extra masking. A row whose error exceeds
tolerance (``domain.tolerance.reference_tolerance``: bf16 2e-2, fp16 4e-3, fp32 1e-4, plus the sink fold's
rounding for a backend that folds sinks in after its kernel) is marked ``mismatch`` by the runner.

The ground truth is :func:`attend_reference` (explicit matmul / mask / exp), not SDPA: it is the
implementation that does not depend on which fused kernel torch picks, so the torch backend's SDPA path
(what it runs on CPU) is itself checked against it; it only computes the sampled rows, so its speed
matters little.
"""

from __future__ import annotations

import torch

from cpbench.kernels.backends.base import Prepared
from cpbench.kernels.backends.torch_ref import attend_reference, gather_kv
from cpbench.kernels.workload import RankWork
from cpbench.domain.tolerance import REFERENCE_TOLERANCE

# Tolerances on max |out - reference| per dtype (domain/tolerance.py says why; the H200 evidence:
# docs/evidence/h200-gpu-tests.log).
TOLERANCE = {torch.bfloat16: REFERENCE_TOLERANCE["bf16"], torch.float16: REFERENCE_TOLERANCE["fp16"],
             torch.float32: REFERENCE_TOLERANCE["fp32"]}


def _row_spans(q_len: int, rows_per_end: int) -> list[tuple[int, int]]:
    if q_len <= 2 * rows_per_end:
        return [(0, q_len)]
    return [(0, rows_per_end), (q_len - rows_per_end, q_len)]


def max_abs_error(work: RankWork, prepared: Prepared, rows_per_end: int = 64, cache: dict | None = None) -> float:
    """Max |output - fp32 reference| over every layer kind's output and the sampled rows.

    ``prepared.forward()`` must have run. Uses the KV values of the last layer of each kind (whose
    output the forward leaves in ``prepared.outputs``), read from the full pool through ``block_tables``
    (``kv_buffers[layer_buffer[layer]]``) also for a window layer that the kernels ran on the SWA pool's
    copy: a kernel that reads the SWA pool through the wrong table fails the check. ``cache`` (optional, one dict per rank): the
    reference rows computed here are kept in it and reused by the next mode's check (two-call and fused
    are checked against the same rows). One device sync in all; a NaN anywhere is returned as NaN.
    """
    cell, model = work.cell, work.model
    errs = []
    cache = {} if cache is None else cache
    for w, out in prepared.local_outputs().items():
        kv = cell.kv_buffers[cell.layer_buffer[model.last_layer(w)]]
        row0 = 0
        for i, seg in enumerate(work.geometry.prev_segments() + work.geometry.next_segments()):
            table_row = cell.block_tables[seg.request]
            for a, b in _row_spans(seg.q_len, rows_per_end):
                key = (w, i, a, b)
                if key not in cache:
                    kv_len = seg.kv_len - seg.q_len + b
                    k = gather_kv(kv[0], table_row, kv_len, cell.page_size)
                    v = gather_kv(kv[1], table_row, kv_len, cell.page_size)
                    q = work.q[row0 + a:row0 + b]
                    cache[key] = attend_reference(q, k, v, w, cell.sinks, out=torch.empty_like(q, dtype=torch.float32))
                errs.append((out[row0 + a:row0 + b].float() - cache[key]).abs().amax())
            row0 += seg.q_len
    return torch.stack(errs).max().item() if errs else 0.0  # max propagates NaN (never hidden)


def max_abs_diff(a: Prepared, b: Prepared) -> float:
    """Max |a - b| over the layer-kind outputs of two prepared forwards (e.g. fused vs two-call)."""
    return max_diff_outputs(a.local_outputs(), b.local_outputs())


def max_diff_outputs(oa: dict, ob: dict) -> float:
    """Max |oa[w] - ob[w]| over the layer kinds ``w`` of two ``window_left -> [tokens, Hq, D]`` output sets
    (NaN when any difference is NaN)."""
    diffs = [(oa[w].float() - ob[w].float()).abs().max().item() for w in oa]
    return float("nan") if any(d != d for d in diffs) else max(diffs)
