"""Per-phase times of one forward whose layers hold communication steps (gather, KV write) besides
attention: how much of a CP layer each phase takes on this rank."""

from __future__ import annotations

import time
from typing import Callable

import torch

from cpbench.bench.backends.base import Prepared

PHASE_COLUMNS = {"comm": "gather_us", "kv_write": "kv_write_us", "attention": "attn_us"}


def phase_times_us(prep: Prepared, clock, barrier: Callable[[], None] | None = None, reps: int = 3) -> dict:
    """Median over ``reps`` eager forwards of the time each step kind takes, summed over layers, µs:
    ``{"gather_us", "kv_write_us", "attn_us"}``.

    On CUDA, events are recorded between consecutive steps (one forward, no host sync inside it), so a
    step's time is the device time from the end of the previous step to its own end: a rank that
    reaches the all-gather early counts its wait for the slower ranks in ``gather_us``. On CPU,
    ``time.perf_counter`` brackets each step (gloo collectives block the host).
    """
    steps = [s for layer in prep.layers for s in layer]
    per_rep = []
    for _ in range(reps):
        clock.sync()
        if barrier is not None:
            barrier()
        if clock.cuda:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)]
            events[0].record()
            for s, ev in zip(steps, events[1:]):
                s.fn()
                ev.record()
            events[-1].synchronize()
            spans = [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])]
        else:
            spans = []
            for s in steps:
                t0 = time.perf_counter()
                s.fn()
                spans.append((time.perf_counter() - t0) * 1e6)
        sums = {col: 0.0 for col in PHASE_COLUMNS.values()}
        for s, us in zip(steps, spans):
            sums[PHASE_COLUMNS[s.kind]] += us
        per_rep.append(sums)
    return {col: sorted(r[col] for r in per_rep)[reps // 2] for col in PHASE_COLUMNS.values()}
