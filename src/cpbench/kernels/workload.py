"""Inputs of one benchmark cell (a batch at one cp_size) and of one rank of it.

A cell owns the tensors every rank reads: the whole batch's queries in token order, the paged KV
caches, the page table and the sinks (and, with ``--swa-pool``, the SWA pool's caches and table). A rank
gathers its local query rows (all prev blocks, then all next blocks, SGLang's local order) from the cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from cpbench.domain.geometry import RankGeometry
from cpbench.kernels.kv import allocate_kv_cache, build_block_tables, build_swa_block_tables, copy_kv_pages
from cpbench.errors import CpbenchInputError
from cpbench.domain.models import ModelSpec


@dataclass
class CellInputs:
    """Tensors of one batch, shared by every rank of a cell.

    Attributes:
        q_all: ``[sum(extend_lens), Hq, D]`` dtype; request s's extend tokens start at ``q_offsets[s]``.
        kv_buffers: the full pool: list of ``(k_cache, v_cache)``, each ``[num_pages, page_size, Hkv, D]``
            (the two halves of one allocation, :func:`cpbench.kernels.kv.allocate_kv_cache`), paged by
            ``block_tables``. Layer i's K/V values are those of buffer ``layer_buffer[i]`` read through
            ``block_tables`` (what the fp32 reference reads); consecutive layers read different memory
            while it fits the budget.
        block_tables: ``[bs, W]`` int32 page table; sinks: ``[Hq]`` fp32 or None.
        swa_block_tables: ``[bs, W]`` int32, the SWA pool's table of a model with window layers and a
            separate SWA KV pool (``--swa-pool``), else None. Window layers read the SWA pool through it
            (the fused call through its row-duplicated copy, as SGLang reads ``zigzag_swa_page_table``).
        swa_kv_buffers: the SWA pool (``--swa-pool``; else empty): caches laid out like ``kv_buffers``'s
            (one allocation each) but paged by ``swa_block_tables``; SWA cache j holds the token K/V of full
            cache ``j % len(kv_buffers)`` (:func:`cpbench.kernels.kv.copy_kv_pages`), so a window layer reads
            through ``swa_block_tables`` the token K/V its ``layer_buffer`` holds through ``block_tables``
            (what the reference reads).
        swa_layer_buffer: per layer, the SWA cache it reads (window layers with ``--swa-pool``), else None.
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
    swa_kv_buffers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    swa_layer_buffer: list[int | None] = field(default_factory=list)

    def reads_swa_pool(self, layer: int) -> bool:
        """Whether layer ``layer`` reads the SWA pool (a window layer of a cell with ``--swa-pool``)."""
        return bool(self.swa_layer_buffer) and self.swa_layer_buffer[layer] is not None

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(k_cache, v_cache)`` layer ``layer``'s kernels read: its SWA-pool cache for a window layer
        with ``--swa-pool`` (paged by ``swa_block_tables``), else its full-pool cache (by ``block_tables``)."""
        if self.reads_swa_pool(layer):
            return self.swa_kv_buffers[self.swa_layer_buffer[layer]]
        return self.kv_buffers[self.layer_buffer[layer]]

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
        """Bytes of one layer's K and V caches (in either pool: an SWA-pool cache has as many pages)."""
        k, v = self.kv_buffers[0]
        return k.numel() * k.element_size() + v.numel() * v.element_size()

    @property
    def kv_buffer_count(self) -> int:
        """KV caches the cell allocates, both pools: ``len(kv_buffers) + len(swa_kv_buffers)`` (each
        ``kv_cache_bytes``)."""
        return len(self.kv_buffers) + len(self.swa_kv_buffers)


def build_cell(model: ModelSpec, extend_lens: Sequence[int], prefix_lens: Sequence[int], *,
               page_size: int, dtype: torch.dtype, device: torch.device | str, seed: int = 0,
               context_len: int | None = None, kv_budget_bytes: int = 4 << 30, swa_pool: bool = False) -> CellInputs:
    """Allocate a cell's inputs (seeded, standard-normal q/k/v, sinks ~ N(0, 1) fp32).

    Up to ``num_layers`` KV caches (``kv_cache_bytes`` each) are allocated while they fit
    ``kv_budget_bytes`` (at least one); layer i of ``n`` caches reads cache ``i % n``.

    ``swa_pool`` (a model with window layers): a separate SWA pool as SGLang's SWAKVPool keeps one, each
    layer's KV in one pool: the SWA pool's table (:func:`cpbench.kernels.kv.build_swa_block_tables`) and
    the same budgeted number ``n`` of caches split between the pools in proportion to their layers, at
    least one each (so a budget of one cache allocates two, and a model of window layers only keeps one
    full cache, which no kernel reads: the values the SWA caches copy): ``n_swa = min(window layers, max(1,
    round(n * window layers / num_layers)))`` SWA caches, ``n_full = max(1, min(full layers, n - n_swa))``
    full caches. The k-th full layer reads full cache ``k % n_full``; the k-th window layer reads SWA cache
    ``j = k % n_swa``, a page-permuted copy (``swa_block_tables``' layout) of full cache ``j % n_full``,
    which is its ``layer_buffer`` (what the reference reads through ``block_tables``). SWA caches have as
    many pages as full ones (every extend and prefix token of the batch; window kernels read only the
    keys in the window).
    Raises torch.OutOfMemoryError when the device is full; CpbenchInputError for a bad page size or
    context length, or ``swa_pool`` for a model without window layers.
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
    wl = model.window_left_per_layer
    if swa_pool and not any(w >= 0 for w in wl):
        raise CpbenchInputError(f"--swa-pool needs a model with sliding-window layers; {model.name} has none")
    if swa_pool:
        n_win = sum(w >= 0 for w in wl)
        n_swa = min(n_win, max(1, round(n_buf * n_win / len(wl))))
        n_full = max(1, min(len(wl) - n_win, n_buf - n_swa))
    else:
        n_swa, n_full = 0, n_buf
    kv_buffers = [allocate_kv_cache(num_pages, page_size, model.num_kv_heads, model.head_dim, dtype,
                                    device, seed + 2 + i) for i in range(n_full)]
    sinks = (torch.randn(model.num_q_heads, generator=gen, device=device, dtype=torch.float32)
             if model.has_sinks else None)
    offsets = [0]
    for e in extend_lens[:-1]:
        offsets.append(offsets[-1] + e)
    swa_tables, swa_kv, swa_layer = None, [], []
    if not swa_pool:
        layer_buffer = [i % n_full for i in range(model.num_layers)]
    else:
        swa_tables = build_swa_block_tables(block_tables, seq_lens, page_size, seed)
        swa_kv = [copy_kv_pages(*kv_buffers[j % n_full], block_tables, swa_tables, seq_lens, page_size)
                  for j in range(n_swa)]
        layer_buffer, counts = [], [0, 0]  # counts: full layers, window layers seen so far
        for w in wl:
            k = counts[w >= 0]
            counts[w >= 0] += 1
            swa_layer.append(k % n_swa if w >= 0 else None)
            layer_buffer.append((k % n_swa) % n_full if w >= 0 else k % n_full)
    return CellInputs(model, tuple(extend_lens), tuple(prefix_lens), page_size, q_all, offsets,
                      kv_buffers, layer_buffer, block_tables, num_pages, sinks, context_len or max(seq_lens),
                      swa_tables, swa_kv, swa_layer)


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
    from cpbench.domain.geometry import FUSED_ORDERS

    if fused_order not in FUSED_ORDERS:
        raise CpbenchInputError(f"unknown --fused-order {fused_order!r}: use one of {', '.join(FUSED_ORDERS)}")
    idx: list[int] = []
    for segs in (geometry.prev_segments(), geometry.next_segments()):
        for s in segs:
            start = cell.q_offsets[s.request] + s.q_start
            idx.extend(range(start, start + s.q_len))
    token_index = torch.tensor(idx, dtype=torch.int64, device=cell.device)
    return RankWork(cell, geometry, cell.q_all.index_select(0, token_index), token_index, fused_order)
