"""FlashInfer's planners as pure Python, for the work split (domain/worksplit.py; docs/design.md §9).

- :func:`fa2_kv_chunk_pages`: ``PrefillBinarySearchKVChunkSize`` (``attention/scheduler.cuh``), no
  CUDA graph: the KV chunk (pages) of fa2's split-KV.
- :func:`fa3_plan`: ``PrefillSM90Plan``: work items (query head, query tile) given to persistent CTAs
  through ``CTACostHeap`` (``attention/heap.h``: a vector of ``(cta, cost)`` kept with libstdc++'s
  ``std::push_heap`` / ``std::pop_heap`` as a min-heap on cost). :class:`CtaCostHeap` repeats those two
  algorithms step by step, so equal costs are broken as FlashInfer breaks them. Segments are sorted
  by ``kv_len``, longest first; ``std::sort`` is not stable, but for up to 16 segments libstdc++
  sorts by insertion, which keeps equal lengths in batch order, as ``sorted`` does here.
- :func:`list_schedule`: CTAs of a non-persistent kernel (fa2) starting in order on free slots.
"""

from __future__ import annotations

import heapq


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def fa2_kv_chunk_pages(packed: list[int], pages: list[int], tile_q: int, max_batch_if_split: int,
                       min_pages: int) -> tuple[bool, int]:
    """``(split_kv, chunk in pages)``: the smallest chunk (>= ``min_pages``) for which the segments'
    packed query tiles (``packed`` rows, ``tile_q`` per tile) times their KV chunks (``pages`` per
    segment) fit ``max_batch_if_split``; split only when that chunk is shorter than the longest."""
    max_pages = max([1, *pages])
    low, high = min_pages, max_pages
    while low < high:
        mid = (low + high) // 2
        n = sum(_cdiv(p, tile_q) * _cdiv(max(k, 1), mid) for p, k in zip(packed, pages))
        if n > max_batch_if_split:
            low = mid + 1
        else:
            high = mid
    return low < max_pages, low


def list_schedule(works: list[int], slots: int) -> list[int]:
    """Work units per slot when CTAs start in order on the first free slot (CTA ``i`` takes
    ``works[i]`` units; an empty one takes 0)."""
    heap = [(0, s) for s in range(slots)]
    loads = [0] * slots
    for w in works:
        t, s = heapq.heappop(heap)
        loads[s] = t + w
        heapq.heappush(heap, (t + w, s))
    return loads


class CtaCostHeap:
    """FlashInfer's ``CTACostHeap``: ``(cta, cost)`` pairs in a vector, a min-heap on cost kept with
    libstdc++'s ``std::push_heap`` / ``std::pop_heap`` (``__push_heap`` / ``__adjust_heap``)."""

    def __init__(self, capacity: int) -> None:
        self.h = [(i, 0.0) for i in range(capacity)]  # all costs equal: already a heap

    @staticmethod
    def _less(a: tuple, b: tuple) -> bool:  # the heap's comparator: a.cost > b.cost (min-heap)
        return a[1] > b[1]

    def _sift_up(self, hole: int, top: int, value: tuple) -> None:
        h = self.h
        parent = (hole - 1) // 2
        while hole > top and self._less(h[parent], value):
            h[hole] = h[parent]
            hole = parent
            parent = (hole - 1) // 2
        h[hole] = value

    def insert(self, element: tuple) -> None:
        self.h.append(element)
        self._sift_up(len(self.h) - 1, 0, element)

    def pop(self) -> tuple:
        h = self.h
        n = len(h) - 1  # the heap without its last slot, which receives the top
        value, h[n] = h[n], h[0]
        hole = second = 0
        while second < (n - 1) // 2:
            second = 2 * (second + 1)
            if self._less(h[second], h[second - 1]):
                second -= 1
            h[hole] = h[second]
            hole = second
        if n % 2 == 0 and second == (n - 2) // 2:
            second = 2 * (second + 1)
            h[hole] = h[second - 1]
            hole = second - 1
        self._sift_up(hole, 0, value)
        return h.pop()


def fa3_plan(q_lens, kv_lens, items, tile_q: int, num_q_heads: int, num_sms: int) -> list[int]:
    """Work per persistent CTA under ``PrefillSM90Plan`` (causal): per query head, segments by
    ``kv_len`` (longest first), each segment's tiles from the last; a tile goes to the CTA with the
    least cost so far and adds ``2 * tile_q + kv_len - (tiles after it) * tile_q``. ``items[i][t]``
    is the work (e.g. KV tiles) of segment ``i``'s query tile ``t``; returns the work per CTA."""
    order = sorted(range(len(q_lens)), key=lambda i: -kv_lens[i])
    heap = CtaCostHeap(num_sms)
    loads = [0] * num_sms
    for _ in range(num_q_heads):
        for i in order:
            n = len(items[i])
            for t in range(n - 1, -1, -1):
                cta, cost = heap.pop()
                heap.insert((cta, cost + 2 * tile_q + kv_lens[i] - (n - t - 1) * tile_q))
                loads[cta] += items[i][t]
    return loads
