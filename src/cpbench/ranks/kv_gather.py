"""Per-layer KV all-gather of zigzag context-parallel prefill, written into the paged pool.

Each rank computes K and V only for its own zigzag tokens (local order: every request's "prev" block,
then every request's "next" block, see ``cpbench.domain.geometry``), but attention needs every extend
token's K/V, so per layer the ranks all-gather them, strip the padding, restore token order and store
the full extend K/V in their paged pool. This follows SGLang's prefill CP
(``layers/utils/cp_utils.py`` ``cp_all_gather_rerange_kv_cache``): pad every rank to the largest
rank's row count, one ``all_gather_into_tensor`` into ``[max_tokens * cp_size, ...]``, keep each
rank's ``per_rank_actual_token`` rows, rerange the zigzag blocks back to token order.

Two modes:

* ``packed``: one ``all_gather_into_tensor`` of ``cat([k, v], -1)``, ``[max_tokens, Hkv, 2D]``;
* ``separate``: two calls, K then V (TransformerEngine's all-gather CP gathers K and V separately).

Both move the same bytes; ``separate`` pays a second collective launch and latency.

The plan is built once per batch on the host; the per-layer path (:func:`gather_kv` and
:func:`write_kv`) only copies into pre-allocated buffers, issues the collectives and runs
``index_select``/``index_copy_`` with precomputed device indices: no allocation, no host sync, so it
can be captured in a CUDA graph on NCCL.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist

from cpbench.domain.geometry import all_ranks
from cpbench.kernels.kv import token_slots
from cpbench.domain.models import check_page_size
from cpbench.errors import CpbenchInputError

MODES = ("packed", "separate")

# torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns); same collective.
_all_gather_into_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise CpbenchInputError(f"unknown KV gather mode {mode!r}: use 'packed' or 'separate'")
    return mode


@dataclass(frozen=True)
class GatherPlan:
    """Where every rank's local rows go, for one batch at one ``cp_size``. Token counts in tokens.

    Attributes:
        tokens_per_rank: real local rows of each rank (``per_rank_actual_token``).
        max_tokens: rows every rank sends (max over ranks, then rounded up to ``pad_to_multiple``);
            the gathered buffer has ``cp_size * max_tokens`` rows, rank r's at ``r * max_tokens``.
        total_tokens: ``sum(extend_lens)``; token order is request 0's extend tokens, then request 1's...
        rank_token_index: per rank, int64 cpu ``[tokens_per_rank[r]]``: token-order row of each local
            row (the same as ``RankWork.token_index``).
        gathered_index: int64 ``[total_tokens]`` on ``device``: gathered-buffer row of each token
            (strips the padding and restores token order in one ``index_select``).
        slots: int64 ``[total_tokens]`` on ``device``: flat slot ``page * page_size + offset`` of each
            token in the ``[num_pages * page_size, Hkv, D]`` view of the cache; request s's extend
            token i sits at position ``prefix_lens[s] + i``.
        max_slot: the largest slot (checked against the cache size on write).
    """

    cp_size: int
    page_size: int
    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    tokens_per_rank: tuple[int, ...]
    max_tokens: int
    total_tokens: int
    rank_token_index: tuple[torch.Tensor, ...]
    gathered_index: torch.Tensor
    slots: torch.Tensor
    max_slot: int

    @property
    def q_offsets(self) -> list[int]:
        """Token-order row where each request's extend tokens start."""
        out = [0]
        for e in self.extend_lens[:-1]:
            out.append(out[-1] + e)
        return out

    def positions(self, rank: int) -> list[tuple[int, int]]:
        """``(request, offset within its extend)`` of each local row of ``rank``, in local order."""
        offs = self.q_offsets  # every extend length is >= 1, so offsets strictly increase
        out = []
        for row in self.rank_token_index[rank].tolist():
            s = bisect_right(offs, row) - 1
            out.append((s, row - offs[s]))
        return out

    def local_rows(self, rank: int, x_all: torch.Tensor) -> torch.Tensor:
        """Rank ``rank``'s local rows of a token-order tensor ``[total_tokens, ...]`` (a copy)."""
        idx = self.rank_token_index[rank].to(x_all.device)
        return x_all.index_select(0, idx)


def build_gather_plan(extend_lens: Sequence[int], prefix_lens: Sequence[int] | None, cp_size: int,
                      page_size: int, block_tables: torch.Tensor, device: torch.device | str, *,
                      pad_to_multiple: int = 1) -> GatherPlan:
    """Precompute a batch's gather and write indices (host work, once per batch).

    Args:
        extend_lens, prefix_lens: tokens per request (prefix None: all 0).
        cp_size: ranks in the CP group.
        page_size: tokens per page (power of two).
        block_tables: int32 ``[bs, W]`` page table; ``W * page_size`` must cover every
            ``prefix + extend``.
        device: where the index tensors live (the cache's device).
        pad_to_multiple: round ``max_tokens`` up to a multiple of this (``2 * cp_size`` gives SGLang's
            physical row count, ``tokens_padded``); 1 = max over ranks.
    Raises:
        CpbenchInputError: bad batch, cp_size or page size; the batch is not CP-eligible (an extend
            length < 2 * cp_size); a page table of the wrong shape.
    """
    check_page_size(page_size)
    geos = all_ranks(extend_lens, prefix_lens, cp_size)
    ext, pre = geos[0].extend_lens, geos[0].prefix_lens
    bad = next((g for g in geos if not g.eligible), None)
    if bad is not None:
        raise CpbenchInputError(f"batch is not CP-eligible at cp_size {cp_size}: {bad.reason}")
    if pad_to_multiple < 1:
        raise CpbenchInputError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
    if block_tables.dim() != 2 or block_tables.shape[0] != len(ext):
        raise CpbenchInputError(f"block_tables must be [bs={len(ext)}, W], got {list(block_tables.shape)}")
    longest = max(e + p for e, p in zip(ext, pre))
    if block_tables.shape[1] * page_size < longest:
        raise CpbenchInputError(f"block_tables width {block_tables.shape[1]} pages x {page_size} tokens "
                                f"< longest sequence {longest} tokens: widen the page table")
    offs = [0]
    for e in ext[:-1]:
        offs.append(offs[-1] + e)
    rank_index = []
    for g in geos:
        parts = [torch.arange(offs[s.request] + s.q_start, offs[s.request] + s.q_start + s.q_len)
                 for s in g.prev_segments() + g.next_segments()]
        rank_index.append(torch.cat(parts).to(torch.int64))
    counts = tuple(int(t.numel()) for t in rank_index)
    max_tokens = -(-max(counts) // pad_to_multiple) * pad_to_multiple
    total = sum(ext)
    gathered = torch.full((total,), -1, dtype=torch.int64)
    for r, idx in enumerate(rank_index):
        gathered[idx] = r * max_tokens + torch.arange(counts[r])
    if sum(counts) != total or bool((gathered < 0).any()):
        raise RuntimeError("zigzag ranks do not cover every extend token exactly once")
    host = block_tables.cpu()
    slots = torch.cat([token_slots(host[s], p + e, page_size)[p:] for s, (e, p) in enumerate(zip(ext, pre))])
    return GatherPlan(cp_size, page_size, ext, pre, counts, max_tokens, total, tuple(rank_index),
                      gathered.to(device), slots.to(device), int(slots.max()))


@dataclass
class GatherBuffers:
    """Pre-allocated buffers of one rank, reused every layer (zeroed once: padding rows stay 0).

    ``send``: packed ``[[max_tokens, Hkv, 2D]]``, separate ``[k [max_tokens, Hkv, D], v [...]]``;
    ``recv``: the same with ``cp_size * max_tokens`` rows; ``k_full, v_full``: ``[total_tokens, Hkv, D]``
    in token order.
    """

    mode: str
    send: list[torch.Tensor]
    recv: list[torch.Tensor]
    k_full: torch.Tensor
    v_full: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [*self.send, *self.recv, self.k_full, self.v_full])


def allocate_gather_buffers(plan: GatherPlan, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                            device: torch.device | str, mode: str) -> GatherBuffers:
    """Allocate one rank's :class:`GatherBuffers` (outside the timed path)."""
    _check_mode(mode)
    rows, hkv, d = plan.max_tokens, num_kv_heads, head_dim
    kw = dict(dtype=dtype, device=device)
    if mode == "packed":
        send = [torch.zeros(rows, hkv, 2 * d, **kw)]
        recv = [torch.zeros(plan.cp_size * rows, hkv, 2 * d, **kw)]
    else:
        send = [torch.zeros(rows, hkv, d, **kw) for _ in range(2)]
        recv = [torch.zeros(plan.cp_size * rows, hkv, d, **kw) for _ in range(2)]
    full = [torch.zeros(plan.total_tokens, hkv, d, **kw) for _ in range(2)]
    return GatherBuffers(mode, send, recv, full[0], full[1])


def gather_kv(plan: GatherPlan, k_local: torch.Tensor, v_local: torch.Tensor,
              group: dist.ProcessGroup | None, mode: str, out_buffers: GatherBuffers
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """All-gather the CP group's local K/V and return the full extend K/V in token order.

    Args:
        k_local, v_local: ``[tokens_per_rank[rank], Hkv, D]`` of the buffers' dtype, local zigzag order.
        group: the CP group (``cp_size`` ranks; this rank's group rank indexes the plan).
        mode: ``"packed"`` (one all_gather_into_tensor of ``[max_tokens, Hkv, 2D]``) or
            ``"separate"`` (two, ``[max_tokens, Hkv, D]`` each).
        out_buffers: from :func:`allocate_gather_buffers` with the same mode.
    Returns:
        ``(k_full, v_full)``: views of ``out_buffers``, ``[total_tokens, Hkv, D]``; each rank receives
        :func:`gather_bytes` bytes.
    Raises:
        CpbenchInputError: mode mismatch, a rank outside the group, wrong local shapes.
    """
    n = check_gather(plan, k_local, v_local, group, mode, out_buffers)
    return gather_kv_checked(plan, k_local, v_local, group, mode, out_buffers, n)


def check_gather(plan: GatherPlan, k_local: torch.Tensor, v_local: torch.Tensor,
                 group: dist.ProcessGroup | None, mode: str, out_buffers: GatherBuffers) -> int:
    """Validate :func:`gather_kv`'s arguments once (outside the timed path); return this rank's row count.

    Raises:
        CpbenchInputError: mode mismatch, a rank outside the group, wrong local shapes.
    """
    if _check_mode(mode) != out_buffers.mode:
        raise CpbenchInputError(f"mode {mode!r} but the buffers were allocated for {out_buffers.mode!r}")
    if group == dist.GroupMember.NON_GROUP_MEMBER:
        raise CpbenchInputError("this rank is not in the CP group: ranks >= cp_size sit the cell out")
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world != plan.cp_size:
        raise CpbenchInputError(f"the group has {world} ranks but the plan is for cp_size {plan.cp_size}")
    n = plan.tokens_per_rank[rank]
    hkv, d = out_buffers.k_full.shape[1:]
    want = (n, hkv, d)
    if tuple(k_local.shape) != want or tuple(v_local.shape) != want:
        raise CpbenchInputError(f"rank {rank} local K/V must be {list(want)}, got "
                                f"{list(k_local.shape)} and {list(v_local.shape)}")
    return n


def gather_kv_checked(plan: GatherPlan, k_local: torch.Tensor, v_local: torch.Tensor,
                      group: dist.ProcessGroup | None, mode: str, out_buffers: GatherBuffers,
                      n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gather_kv` after :func:`check_gather` returned ``n``: only launches work (the per-layer
    step of a timed forward)."""
    d = out_buffers.k_full.shape[2]
    kb, vb, idx = out_buffers.k_full, out_buffers.v_full, plan.gathered_index
    if mode == "packed":
        send, recv = out_buffers.send[0], out_buffers.recv[0]
        send[:n, :, :d].copy_(k_local)
        send[:n, :, d:].copy_(v_local)
        _all_gather_into_tensor(recv, send, group=group)
        torch.index_select(recv[..., :d], 0, idx, out=kb)
        torch.index_select(recv[..., d:], 0, idx, out=vb)
    else:
        for src, send, recv, full in zip((k_local, v_local), out_buffers.send, out_buffers.recv, (kb, vb)):
            send[:n].copy_(src)
            _all_gather_into_tensor(recv, send, group=group)
            torch.index_select(recv, 0, idx, out=full)
    return kb, vb


def write_kv(plan: GatherPlan, k_full: torch.Tensor, v_full: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor) -> None:
    """Store the full extend K/V (``[total_tokens, Hkv, D]``, token order) in the paged caches
    (``[num_pages, page_size, Hkv, D]``, contiguous) through the plan's slots: one ``index_copy_``
    per cache on the flat ``[num_pages * page_size, Hkv, D]`` view (SGLang's set_kv_buffer).

    Raises:
        CpbenchInputError: the cache's page size differs from the plan's, or a slot is past its end.
    """
    for full, cache in ((k_full, k_cache), (v_full, v_cache)):
        if cache.dim() != 4 or cache.shape[1] != plan.page_size:
            raise CpbenchInputError(f"cache must be [num_pages, page_size={plan.page_size}, Hkv, D], "
                                    f"got {list(cache.shape)}")
        flat = cache.view(-1, *cache.shape[2:])
        if plan.max_slot >= flat.shape[0]:
            raise CpbenchInputError(f"page table reaches slot {plan.max_slot} but the cache has "
                                    f"{flat.shape[0]} slots: allocate more pages")
        flat.index_copy_(0, plan.slots, full)


def gather_bytes(plan: GatherPlan, num_kv_heads: int, head_dim: int, elem_size: int, mode: str) -> int:
    """Bytes of one layer's gathered K and V on each rank: the all_gather_into_tensor output,
    ``cp_size * max_tokens * Hkv * 2D * elem_size`` (padding and the rank's own shard included,
    nccl-tests' size convention). The same for both modes."""
    _check_mode(mode)
    return plan.cp_size * plan.max_tokens * num_kv_heads * 2 * head_dim * elem_size

