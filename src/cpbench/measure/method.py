"""The hook a study's timing plugs into: besides eager and graph (timed here, :mod:`cpbench.measure.rank`), a
timing a study adds (``studies/breakable``: the prefill forward under breakable CUDA graphs) is a
:class:`TimingFactory` the commands hand to the cell loop (``Runner(timings=...)``), which asks it once per cell
for a :class:`TimingMethod` and gives that to every rank, mode and backend of the cell. The core iterates the
tuple it is given; it imports no study (import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from cpbench.domain.modes import Status

if TYPE_CHECKING:
    from cpbench.kernels.backends.base import Prepared
    from cpbench.kernels.workload import RankWork
    from cpbench.ranks.group import RankGroup, StatusPair

Fn = Callable[[], None]
RankJob = Any  # cpbench.measure.rank.RankJob (which imports this module)


class Unavailable(Exception):
    """A timing cannot run on a cell (its rows get ``status`` and the one-line ``reason``; the other timings
    still run)."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class TimingMethod(Protocol):
    """One cell's form of a study's timing, shared by the cell's ranks, modes and backends.

    Attributes:
        timing: the ``timing`` column of its rows (a :class:`~cpbench.domain.modes.Timing`).
        keeps_first_outputs: its rows are checked against the outputs the first (eager) forward leaves:
            :meth:`columns` receives copies of them.
        keeps_host_samples: its rows keep ``host_samples_us`` (the host's issue time per sample).
        extra_flops: FLOPs its forward runs beside attention (added to the row's ``flops``).
        columns_always: the columns every row of the timing carries, even when :meth:`columns` failed.
    """

    timing: str
    keeps_first_outputs: bool
    keeps_host_samples: bool
    extra_flops: float
    columns_always: dict

    def callables(self, job: RankJob, work: RankWork, prepared: dict[str, Prepared], modes: list[str],
                  group: RankGroup) -> tuple[dict[str, Fn], dict[str, StatusPair]]:
        """Per mode, the zero-argument callable one sample times, and the status of the modes it could not set up
        (agreed over the cell's ranks, as :func:`cpbench.measure.rank.measure_rank` agrees every phase)."""

    def samples(self, job: RankJob, work: RankWork, fns: dict[str, Fn],
                timer: Callable[[dict, dict], dict]) -> tuple[dict, dict, dict]:
        """``(mode -> samples µs, mode -> timing info, mode -> columns measured with them)``; ``timer(fns, info)``
        is the core's interleaved ABBA timer (:func:`cpbench.measure.timing.time_interleaved`)."""

    def columns(self, job: RankJob, work: RankWork, mode: str, measured: dict, first_outputs: dict | None,
                prepared: Prepared, group: RankGroup) -> dict:
        """A timed mode's further columns (``measured``: what :meth:`samples` gave for it); raises on failure (the
        row keeps :attr:`columns_always`)."""

    def release(self) -> None:
        """Free what the cell held (its CUDA graphs); the cell is done."""


class TimingFactory(Protocol):
    """A study's timing, as the commands hand it to the cell loop.

    Attributes:
        timing: the timing it provides.
        phase: the wall-time phase building a cell's method is counted in (:mod:`cpbench.measure.walltime`).
    """

    timing: str
    phase: str

    def for_cell(self, cfg: Any, cell: Any, tokens_padded: int, group: RankGroup) -> TimingMethod:
        """The method for one cell (``cfg``: the sweep's ``SweepConfig``; ``cell``: its ``CellSpec``; every rank
        pads to ``tokens_padded`` rows). Raises :class:`Unavailable` when the cell cannot run this timing,
        CpbenchInputError for bad input; other exceptions become an ``error``/``oom`` status."""
