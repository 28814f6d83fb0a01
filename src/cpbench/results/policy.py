"""The numbers cpbench decides by, in one place: every sentence that states one is formatted from here.

* ``HOST_BOUND_RATIO``: an eager forward whose latency exceeds its GPU busy time by this factor is
  launch-bound; its latency measures how fast the host enqueues work (reports mark it †).
* ``CLOCK_DROP_RATIO``: an SM clock that ends a variant's timing below this fraction of where it started
  has dropped (the row's ``clock_drop``).
* :class:`SampleFloors`: how many timed samples a variant gets at least, when the precision stop may end
  sampling, and how many a comparison needs before a slowdown can fail it.
* :class:`TimingPolicy`: how one sweep times a variant (warm-up, budget, precision stop, passes, floors),
  passed whole from the sweep's configuration to the rank that times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

HOST_BOUND_RATIO = 1.2
CLOCK_DROP_RATIO = 0.9


def host_bound_text() -> str:
    """``1.2×``: the host-bound factor as the reports write it."""
    return f"{HOST_BOUND_RATIO:g}×"


def clock_drop_text() -> str:
    """``10%``: how far the SM clock must fall while timing to count as a drop."""
    return f"{100 * (1 - CLOCK_DROP_RATIO):.0f}%"


@dataclass(frozen=True)
class SampleFloors:
    """Sample counts (timed forwards per variant).

    Attributes:
        cuda / cpu: at least this many samples per variant, whatever the budget (CUDA events / perf_counter).
        stop: the precision stop (``--rel-ci``) is not tried before this many samples in all (split over the
            passes): fewer give too wide a median CI for the rule to mean anything.
        gate: both rows of a comparison need this many samples before a slowdown can fail ``cpbench compare``
            (``--min-samples``): with fewer, the bootstrap CI is too narrow a guide.
    """

    cuda: int = 5
    cpu: int = 3
    stop: int = 20
    gate: int = 10

    def min_reps(self, cuda: bool) -> int:
        """Samples a variant gets at least on this clock."""
        return self.cuda if cuda else self.cpu

    def min_stop(self, passes: int) -> int:
        """Samples per pass before the precision stop is tried (``stop`` split over ``passes``, rounded up)."""
        return math.ceil(self.stop / max(1, passes))


FLOORS = SampleFloors()


@dataclass(frozen=True)
class TimingPolicy:
    """How a variant is timed: ``warmup`` untimed forwards, up to ``budget_ms`` of samples a sweep (split over
    ``passes``), fewer once the median's 95 % CI is within ``rel_ci`` (None: never), never fewer than the
    floors. Built by ``SweepConfig.timing_policy``."""

    warmup: int = 3
    budget_ms: float = 200.0
    rel_ci: float | None = None
    passes: int = 1
    floors: SampleFloors = field(default_factory=SampleFloors)

    @property
    def pass_budget_ms(self) -> float:
        """The budget of one pass, ms."""
        return self.budget_ms / self.passes

    def min_reps(self, cuda: bool) -> int:
        return self.floors.min_reps(cuda)

    @property
    def min_stop(self) -> int:
        return self.floors.min_stop(self.passes)
