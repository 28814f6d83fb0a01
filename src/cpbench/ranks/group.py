"""Where CP ranks run: the :class:`RankGroup` protocol and :class:`LocalGroup` (every rank in this
process, one after another: the ``simulated`` launch).

One rank is the unit of work (:func:`cpbench.measure.rank.measure_rank`); a group decides which ranks
this process measures, how ranks wait for each other before a sample, how they agree on numbers that
must be equal everywhere (repeat counts, failure), and how rows reach the one writer (rank 0). The
torch.distributed group (``launch = "torchrun"``) lives in :mod:`cpbench.ranks`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable, Protocol, Sequence

from cpbench.domain.modes import Status

StatusPair = tuple[Status, str]  # (status, reason) of a rank's attempt, as ranks agree on it
OK_PAIR: StatusPair = (Status.OK, "")  # fine


class PeerFailure(Exception):
    """Raised on a rank that met another rank's failure at an agreement inside a forward (see
    :attr:`Exchange.agreeing`): ``status`` is the agreed ``(status, reason)``, already known to every rank."""

    def __init__(self, status: StatusPair) -> None:
        super().__init__(status[1])
        self.status = status


class Exchange:
    """Per-layer communication of a CP layer: ``exchange(layer) -> [Step, ...]`` to run before that
    layer's attention, ``columns`` the rows of a forward using it carry (e.g. ``gather_bytes``), and
    ``check()``: a collective correctness check run by every rank after the preparation is agreed
    (building an Exchange itself runs no collective, so a rank that fails to prepare leaves no other
    rank waiting).

    ``agreeing()``: a context in which every collective of a forward (and of ``check``) is preceded by
    an agreement on the status (``agree_status("ok")``), raising :class:`PeerFailure` when another rank
    failed; a rank that fails inside the context must make its failure its next agreement. Untimed
    forwards (the first one, the check) run in it, so a rank that fails mid-forward (an OOM in one
    layer) leaves no other rank waiting in that layer's gather."""

    def __init__(self, steps_for_layer: Callable[[int], list], columns: dict | None = None,
                 check: Callable[[], None] = lambda: None,
                 agreeing: Callable[[], AbstractContextManager] = nullcontext) -> None:
        self._steps = steps_for_layer
        self.columns = dict(columns or {})
        self.check = check
        self.agreeing = agreeing

    def __call__(self, layer: int) -> list:
        return self._steps(layer)


class RankGroup(Protocol):
    """The ranks of a launch, as the cell loop and :func:`measure_rank` see them.

    Attributes:
        launch: ``"simulated"`` or ``"torchrun"`` (the results column).
        world_size: processes in the launch (1 when simulated).
        rank: this process's global rank (0 when simulated).
    """

    launch: str
    world_size: int
    rank: int

    @property
    def writes_rows(self) -> bool:
        """True on the one process that writes the run directory (rank 0)."""

    def begin_cell(self, cell_label: str, cp_size: int) -> None:
        """Enter a cell: check every process holds the same cell, select the CP group of ``cp_size``.
        Raises RuntimeError when processes disagree (a bug, never bad input)."""

    def local_ranks(self, cp_size: int, wanted: Sequence[int] | None = None) -> list[int]:
        """CP ranks this process measures for a cell of ``cp_size`` (restricted to ``wanted``)."""

    def barrier(self) -> None:
        """Wait until every rank of the cell's CP group reaches this point (device work synced first)."""

    def agree(self, value: float) -> float:
        """The maximum of ``value`` over the cell's CP ranks (repeat counts, failure flags)."""

    def agree_status(self, status: StatusPair) -> StatusPair:
        """The first non-ok status over the cell's CP ranks (by rank), so every rank records the same."""

    def collect(self, rows: list[dict]) -> list[dict]:
        """Every process's rows on the writer (rank 0), in rank order; [] on the other processes."""

    def all_to_all(self) -> Any:
        """``a2a(out, inp, what)``: ``all_to_all_single`` over the cell's CP group with equal splits (attribute
        ``ranks``: the group size), for the MoE dispatch and combine of a breakable forward; None when the
        ranks are simulated (no collective to run)."""

    def exchange(self, work: Any, mode: str) -> Exchange | None:
        """Per-layer communication steps to run before attention, or None (attention only)."""

    def share(self, obj: Any) -> Any:
        """The writer's ``obj`` on every process (the writer plans cells and reads the run directory)."""


class LocalGroup:
    """Every CP rank in this process, measured one after another (``launch = "simulated"``).

    The device sync is the barrier; agreement is the identity (ranks do not run at the same time, so
    each rank keeps its own repeat count and status); no communication steps run.
    """

    launch = "simulated"
    world_size = 1
    rank = 0
    writes_rows = True

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        self._sync = sync

    def begin_cell(self, cell_label: str, cp_size: int) -> None:
        return None

    def local_ranks(self, cp_size: int, wanted: Sequence[int] | None = None) -> list[int]:
        return [r for r in (wanted if wanted is not None else range(cp_size)) if 0 <= r < cp_size]

    def barrier(self) -> None:
        self._sync()

    def agree(self, value: float) -> float:
        return value

    def agree_status(self, status: StatusPair) -> StatusPair:
        return status

    def collect(self, rows: list[dict]) -> list[dict]:
        return rows

    def all_to_all(self) -> None:
        return None

    def exchange(self, work: Any, mode: str) -> None:
        return None

    def share(self, obj: Any) -> Any:
        return obj
