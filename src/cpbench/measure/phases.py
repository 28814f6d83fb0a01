"""Per-phase times of one forward whose layers hold communication steps (gather, KV write) besides
attention: how much of a CP layer each phase takes on this rank."""

from __future__ import annotations

import time
from typing import Callable

import torch

from cpbench.kernels.backends.base import Prepared, Step

PHASE_COLUMNS = {"comm": "gather_us", "kv_write": "kv_write_us", "attention": "attn_us"}


def span_times_us(chunks: list[list[Step]], clock, barrier: Callable[[], None] | None = None) -> list[float]:
    """One eager forward run as consecutive ``chunks`` of steps (a step, or a layer), µs per chunk.

    On CUDA, events are recorded between consecutive chunks (no host sync inside the forward), so a
    chunk's time is the device time from the end of the previous chunk to its own end: launch gaps count,
    and a rank that reaches an all-gather early counts its wait for slower ranks there. On CPU,
    ``time.perf_counter`` brackets each chunk (gloo collectives block the host). The device is synchronised
    and ``barrier`` (ranks of a launch) runs before the forward.
    """
    clock.sync()
    if barrier is not None:
        barrier()
    if clock.cuda:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(chunks) + 1)]
        events[0].record()
        for chunk, ev in zip(chunks, events[1:]):
            for s in chunk:
                s.fn()
            ev.record()
        events[-1].synchronize()
        return [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])]
    spans = []
    for chunk in chunks:
        t0 = time.perf_counter()
        for s in chunk:
            s.fn()
        spans.append((time.perf_counter() - t0) * 1e6)
    return spans


def median_sums(per_rep: list[dict]) -> dict:
    """Per key, the median over repetitions (the upper one for an even count)."""
    return {k: sorted(r[k] for r in per_rep)[len(per_rep) // 2] for k in per_rep[0]}


def phase_times_us(prep: Prepared, clock, barrier: Callable[[], None] | None = None, reps: int = 3) -> dict:
    """Median over ``reps`` eager forwards (:func:`span_times_us`, one chunk per step) of the time each
    step kind takes, summed over layers, µs: ``{"gather_us", "kv_write_us", "attn_us"}``. A rank that
    reaches the all-gather early counts its wait for the slower ranks in ``gather_us``."""
    steps = [s for layer in prep.layers for s in layer]
    per_rep = []
    for _ in range(reps):
        sums = {col: 0.0 for col in PHASE_COLUMNS.values()}
        for s, us in zip(steps, span_times_us([[s] for s in steps], clock, barrier)):
            sums[PHASE_COLUMNS[s.kind]] += us
        per_rep.append(sums)
    return median_sums(per_rep)
