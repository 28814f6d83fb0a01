"""Inputs of one benchmark cell (a batch at one cp_size) and of one rank of it.

A cell owns the tensors every rank reads: the whole batch's queries in token order, the paged KV
caches, the page table and the sinks. A rank gathers its local query rows (all prev blocks, then all
next blocks, SGLang's local order) from the cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from cpbench.spec.geometry import RankGeometry
from cpbench.kernels.kv import allocate_kv_cache, build_block_tables, build_swa_block_tables
from cpbench.spec.models import ModelSpec


@dataclass
class CellInputs:
    """Tensors of one batch, shared by every rank of a cell.

    Attributes:
        q_all: ``[sum(extend_lens), Hq, D]`` dtype; request s's extend tokens start at ``q_offsets[s]``.
        kv_buffers: list of ``(k_cache, v_cache)``, each ``[num_pages, page_size, Hkv, D]``; layer i reads
            buffer ``layer_buffer[i]`` (consecutive layers read different memory while it fits the budget).
        block_tables: ``[bs, W]`` int32 page table; sinks: ``[Hq]`` fp32 or None.
        swa_block_tables: ``[bs, W]`` int32, the SWA pool's table of a model with window layers and a
            separate SWA KV pool (``--swa-pool``), else None. The fused call duplicates it as SGLang does;
            cpbench's kernels read ``block_tables`` for every layer (the SWA table is accounted, not read).
    """

    model: ModelSpec
    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    page_size: int
    q_all: torch.Tensor
    q_offsets: list[int]
    kv_buffers: list[tuple[torch.Tensor, torch.Tensor]]
    layer_buffer: list[int]
    block_tables: torch.Tensor
    num_pages: int
    sinks: torch.Tensor | None
    context_len: int
    swa_block_tables: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.q_all.device

    @property
    def dtype(self) -> torch.dtype:
        return self.q_all.dtype

    @property
    def seq_lens(self) -> list[int]:
        return [e + p for e, p in zip(self.extend_lens, self.prefix_lens)]

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of one layer's K and V caches."""
        k, v = self.kv_buffers[0]
        return k.numel() * k.element_size() + v.numel() * v.element_size()


def build_cell(model: ModelSpec, extend_lens: Sequence[int], prefix_lens: Sequence[int], *,
               page_size: int, dtype: torch.dtype, device: torch.device | str, seed: int = 0,
               context_len: int | None = None, kv_budget_bytes: int = 4 << 30, swa_pool: bool = False) -> CellInputs:
    """Allocate a cell's inputs (seeded, standard-normal q/k/v, sinks ~ N(0, 1) fp32).

    Up to ``num_layers`` KV buffers are allocated while they fit ``kv_budget_bytes`` (at least one).
    ``swa_pool``: also build the SWA pool's table (:func:`cpbench.kernels.kv.build_swa_block_tables`).
    Raises torch.OutOfMemoryError when the device is full; CpbenchInputError for a bad page size or
    context length.
    """
    seq_lens = [e + p for e, p in zip(extend_lens, prefix_lens)]
    block_tables, num_pages = build_block_tables(seq_lens, page_size, context_len, seed, device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    total = sum(extend_lens)
    # q_all: [sum(extend_lens), Hq, D]
    q_all = torch.randn((total, model.num_q_heads, model.head_dim), generator=gen, device=device,
                        dtype=torch.float32).to(dtype)
    per_layer = 2 * num_pages * page_size * model.num_kv_heads * model.head_dim * q_all.element_size()
    n_buf = max(1, min(model.num_layers, kv_budget_bytes // max(per_layer, 1)))
    kv_buffers = [allocate_kv_cache(num_pages, page_size, model.num_kv_heads, model.head_dim, dtype,
                                    device, seed + 2 + i) for i in range(n_buf)]
    sinks = (torch.randn(model.num_q_heads, generator=gen, device=device, dtype=torch.float32)
             if model.has_sinks else None)
    offsets = [0]
    for e in extend_lens[:-1]:
        offsets.append(offsets[-1] + e)
    return CellInputs(model, tuple(extend_lens), tuple(prefix_lens), page_size, q_all, offsets,
                      kv_buffers, [i % n_buf for i in range(model.num_layers)], block_tables,
                      num_pages, sinks, context_len or max(seq_lens),
                      build_swa_block_tables(block_tables, seq_lens, page_size, seed) if swa_pool else None)


@dataclass
class RankWork:
    """What one rank computes: its geometry, its local queries and the cell it reads.

    ``q``: ``[tokens_logical, Hq, D]`` in local order (prev blocks, then next blocks).
    ``token_index``: int64 ``[tokens_logical]``, row of ``cell.q_all`` for each local row.
    ``fused_order``: segment order of the fused call (``RankGeometry.calls``), default SGLang's prev-next.
    """

    cell: CellInputs
    geometry: RankGeometry
    q: torch.Tensor
    token_index: torch.Tensor
    fused_order: str = "prev-next"

    @property
    def model(self) -> ModelSpec:
        return self.cell.model


def rank_work(cell: CellInputs, geometry: RankGeometry, fused_order: str = "prev-next") -> RankWork:
    """Gather one rank's query rows from the cell (the geometry must be CP-eligible); ``fused_order``
    as in :meth:`RankGeometry.calls` (CpbenchInputError for an unknown one)."""
    from cpbench.spec.geometry import FUSED_ORDERS
    from cpbench.errors import CpbenchInputError

    if fused_order not in FUSED_ORDERS:
        raise CpbenchInputError(f"unknown --fused-order {fused_order!r}: use one of {', '.join(FUSED_ORDERS)}")
    idx: list[int] = []
    for segs in (geometry.prev_segments(), geometry.next_segments()):
        for s in segs:
            start = cell.q_offsets[s.request] + s.q_start
            idx.extend(range(start, start + s.q_len))
    token_index = torch.tensor(idx, dtype=torch.int64, device=cell.device)
    return RankWork(cell, geometry, cell.q_all.index_select(0, token_index), token_index, fused_order)
