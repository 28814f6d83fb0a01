"""Where a sweep's wall time goes: seconds per harness phase, summed over cells, ranks and modes.

The phases (host wall clock, ``time.perf_counter``; a phase that waits on the device includes the wait):

* ``startup``: before the first cell (planning, the run directory, the matmul peak, the manifest);
* ``build``: a cell's inputs (KV cache, queries, page tables) and cell metrics;
* ``rest``: a cell's rest-of-layer work for the breakable timing (its weights and buffers);
* ``prepare``: each mode's setup (metadata, page tables, plan) and its exchange;
* ``check``: the first forward, the correctness gate and the fused-vs-two-call diff (and the eager outputs the
  breakable forward is checked against);
* ``profile``: the profiled forwards that count kernels (a profiler warm-up step and the counted one);
* ``capture``: CUDA graph capture;
* ``warmup`` and ``samples``: the untimed and the timed forwards;
* ``extra``: per-phase forwards (gather / KV write / attention, for forwards with communication steps);
* ``other``: whatever is left of the sweep's wall time (rows, tables, progress).

The manifest keeps them per invocation in ``sweep_phase_s`` (next to ``sweep_wall_s``).
"""

from __future__ import annotations

import contextlib
import time

PHASES = ("startup", "build", "rest", "prepare", "check", "profile", "capture", "warmup", "samples", "extra", "other")


class PhaseTimes:
    """Accumulates seconds per phase name (:data:`PHASES`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` (s) to ``phase``. Raises ValueError for a name not in :data:`PHASES`."""
        if phase not in PHASES:
            raise ValueError(f"unknown harness phase {phase!r}: use one of {', '.join(PHASES)}")
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    @contextlib.contextmanager
    def __call__(self, phase: str):
        """``with times("prepare"): ...`` adds the block's wall time to ``phase``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - t0)

    def breakdown(self, wall_s: float) -> dict[str, float]:
        """Seconds per phase (rounded to 0.1 s, in :data:`PHASES` order), ``other`` = ``wall_s`` minus
        the phases timed (never below 0)."""
        out = {p: round(self.seconds[p], 1) for p in PHASES if p in self.seconds and p != "other"}
        out["other"] = round(max(0.0, wall_s - sum(self.seconds.get(p, 0.0) for p in PHASES if p != "other")), 1)
        return out
