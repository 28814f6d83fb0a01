"""Paged KV cache and page tables (block_tables), as an engine's allocator would lay them out.

Cache layout (FlashInfer "NHD"): ``k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim]``;
token ``t`` of request ``s`` lives in page ``block_tables[s, t // page_size]``, slot ``t % page_size``.
SGLang's TRT-LLM backend reads the same memory as the HND view ``[num_pages, num_kv_heads, page_size,
head_dim]`` (``permute(0, 2, 1, 3)``).
"""

from __future__ import annotations

from typing import Sequence

import torch

from cpbench.domain.geometry import Segment
from cpbench.domain.models import check_page_size
from cpbench.errors import CpbenchInputError


def pages_for(tokens: int, page_size: int) -> int:
    """``ceil(tokens / page_size)``."""
    return -(-tokens // page_size)


def last_page_len(kv_len: int, page_size: int) -> int:
    """Tokens in the last page of a ``kv_len``-token sequence (FlashInfer paged_kv_last_page_len),
    in ``[1, page_size]``; e.g. kv_len 100 at page_size 16 gives 4."""
    if kv_len < 1:
        raise CpbenchInputError(f"kv_len must be >= 1, got {kv_len}")
    return kv_len - (pages_for(kv_len, page_size) - 1) * page_size


def build_block_tables(seq_lens: Sequence[int], page_size: int, context_len: int | None = None,
                       seed: int = 0, device: torch.device | str = "cpu") -> tuple[torch.Tensor, int]:
    """Page table of a batch, pages drawn from a seeded permutation so requests interleave.

    Args:
        seq_lens: KV tokens per request (prefix + extend).
        page_size: tokens per page (power of two).
        context_len: tokens the table's width is sized for, ``W = ceil(context_len / page_size)``
            (SGLang TRT-LLM backend sizes it from the model context length); default max(seq_lens).
    Returns:
        ``(block_tables, num_pages)``: ``block_tables`` int32 ``[bs, W]``; columns past a request's
        pages hold 0 (never read: kv lengths bound every read).
    Raises:
        CpbenchInputError: bad page size, or context_len shorter than the longest sequence.
    """
    check_page_size(page_size)
    longest = max(seq_lens)
    ctx = longest if context_len is None else context_len
    if ctx < longest:
        raise CpbenchInputError(
            f"--context-len {ctx} is shorter than the longest sequence ({longest} tokens): raise it")
    width = pages_for(ctx, page_size)
    need = [pages_for(n, page_size) for n in seq_lens]
    num_pages = sum(need)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_pages, generator=gen, dtype=torch.int64).to(torch.int32)
    table = torch.zeros(len(seq_lens), width, dtype=torch.int32)  # block_tables: [bs, W] int32
    start = 0
    for s, n in enumerate(need):
        table[s, :n] = perm[start:start + n]
        start += n
    return table.to(device), num_pages


def build_swa_block_tables(block_tables: torch.Tensor, seq_lens: Sequence[int], page_size: int,
                           seed: int = 0) -> torch.Tensor:
    """The SWA pool's page table of a model with a separate sliding-window KV pool (SGLang SWAKVPool).

    SGLang translates the full table's entries into SWA-pool page ids and keeps the result in a table of the
    same shape (trtllm_mha_backend.py: ``swa_page_table`` is built like ``page_table``, ``[bs, W]`` int32).
    Here the SWA pool's pages are a seeded permutation of ``0..sum(pages)-1`` of its own (another layout
    than the full table's), zero past each request's pages; ``block_tables`` gives the shape and device.
    """
    need = [pages_for(n, page_size) for n in seq_lens]
    perm = torch.randperm(sum(need), generator=torch.Generator().manual_seed(seed + 7919),
                          dtype=torch.int64).to(torch.int32)
    table = torch.zeros(tuple(block_tables.shape), dtype=torch.int32)  # swa_page_table: [bs, W] int32
    start = 0
    for s, n in enumerate(need):
        table[s, :n] = perm[start:start + n]
        start += n
    return table.to(block_tables.device)


def duplicate_block_tables(block_tables: torch.Tensor, fused_order: str = "prev-next") -> torch.Tensor:
    """Row-duplicated page table of the fused call, ``[2*bs, W]``: ``cat(t, t)`` (SGLang PR #33137; also
    ``next-prev``) or ``t.repeat_interleave(2, 0)`` for the ``interleaved`` order, so that segment
    ``i`` of :meth:`RankGeometry.calls` reads row ``i``."""
    if fused_order == "interleaved":
        return block_tables.repeat_interleave(2, dim=0)
    return torch.cat([block_tables, block_tables], dim=0)


def table_bytes(block_tables: torch.Tensor) -> int:
    """Bytes of a page table tensor."""
    return block_tables.numel() * block_tables.element_size()


def allocate_kv_cache(num_pages: int, page_size: int, num_kv_heads: int, head_dim: int,
                      dtype: torch.dtype, device: torch.device | str, seed: int = 0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random K and V caches, each ``[num_pages, page_size, num_kv_heads, head_dim]`` of ``dtype``
    (standard normal, seeded), as the two contiguous halves of one allocation ``[2, num_pages, ...]``:
    V starts ``num_pages`` blocks after K, which TRT-LLM's FMHAv2 paged kernel needs to address both
    from one base pointer (:func:`kv_block_offsets`). Raises torch.OutOfMemoryError when the device is full."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (num_pages, page_size, num_kv_heads, head_dim)
    kv = torch.empty((2, *shape), device=device, dtype=dtype)  # kv: [2, num_pages, page_size, Hkv, D]
    for half in kv:  # K, then V: the same values as two separate seeded draws
        half.copy_(torch.randn(shape, generator=gen, device=device, dtype=torch.float32))
    return kv[0], kv[1]


def copy_kv_pages(k: torch.Tensor, v: torch.Tensor, block_tables: torch.Tensor, to_tables: torch.Tensor,
                  seq_lens: Sequence[int], page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The K and V caches ``[num_pages, page_size, Hkv, D]`` (paged by ``block_tables [bs, W]``) copied
    into a new pair laid out by ``to_tables [bs, W]``: page ``to_tables[s, p]`` of the copy holds page
    ``block_tables[s, p]`` of ``k``/``v`` for each request's used pages ``p < ceil(seq_lens[s] / page_size)``,
    so every token reads the same K/V through either table (the SWA pool's caches, SGLang SWAKVPool).
    The copy is one ``[2, num_pages, ...]`` allocation like :func:`allocate_kv_cache`'s, so
    :func:`kv_block_offsets` addresses it; pages no request uses hold a copy of page 0 (never read).
    One gather per half, no temporary. Raises torch.OutOfMemoryError when the device is full."""
    need = [pages_for(n, page_size) for n in seq_lens]
    src = torch.cat([block_tables[s, :n] for s, n in enumerate(need)]).long()
    dst = torch.cat([to_tables[s, :n] for s, n in enumerate(need)]).long()
    if dst.unique().numel() != dst.numel():
        raise ValueError("to_tables maps two used pages to one page")
    source = torch.zeros(k.shape[0], dtype=torch.int64, device=k.device)  # source[d]: the page copied to d
    source[dst.to(k.device)] = src.to(k.device)
    kv = torch.empty((2, *k.shape), dtype=k.dtype, device=k.device)  # kv: [2, num_pages, page_size, Hkv, D]
    for half, cache in zip(kv, (k, v)):
        torch.index_select(cache, 0, source, out=half)
    return kv[0], kv[1]


def kv_block_offsets(block_tables: torch.Tensor, num_pages: int) -> torch.Tensor:
    """Pre-expanded K/V block offsets ``[rows, 2, W]`` int32 of a page table ``[rows, W]`` for a cache
    made by :func:`allocate_kv_cache`: ``[:, 0]`` = the page (K block), ``[:, 1]`` = page + ``num_pages``
    (V block), both in blocks from K's base pointer (flashinfer ``trtllm_fmha_v2_prefill``, separate
    K/V form). Unused columns (page 0) are never read."""
    return torch.stack([block_tables, block_tables + num_pages], dim=1)


def paged_kv_arrays(segments: Sequence[Segment], block_tables: torch.Tensor, page_size: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer paged-KV arrays of a call, built on the host from the page-table rows the segments read.

    Returns ``(paged_kv_indptr [n+1], paged_kv_indices [sum pages], paged_kv_last_page_len [n])``,
    int32 on ``block_tables.device``. For the fused call the rows come from the duplicated table.
    """
    host = block_tables.cpu()
    pages = [pages_for(s.kv_len, page_size) for s in segments]
    indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
    indices = torch.cat([host[s.table_row, :n] for s, n in zip(segments, pages)])
    last = torch.tensor([last_page_len(s.kv_len, page_size) for s in segments], dtype=torch.int32)
    dev = block_tables.device
    return indptr.to(dev), indices.to(dev), last.to(dev)


def token_slots(block_row: torch.Tensor, kv_len: int, page_size: int) -> torch.Tensor:
    """Flat slot ids ``page * page_size + offset`` of the first ``kv_len`` tokens of a table row,
    int64 ``[kv_len]``, for gathering from ``cache.view(-1, Hkv, D)``."""
    t = torch.arange(kv_len, device=block_row.device)
    return block_row[t // page_size].long() * page_size + t % page_size
