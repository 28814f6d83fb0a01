"""The records an engine's trace is read into, one :class:`RankTrace` per rank (``cpbench profile --from``), and
the error every trace reader raises. The readers: :mod:`cpbench.studies.engine_traces.torch_trace` (torch.profiler),
:mod:`cpbench.studies.engine_traces.nsys_trace` (Nsight Systems); :mod:`cpbench.studies.engine_traces.traces` reads the files given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cpbench.errors import CpbenchInputError

MAX_START_SKEW_S = 600.0  # ranks of one profiled run start within this; farther apart is another run


class TraceInputError(CpbenchInputError):
    """A file given to ``--from`` that cannot be read as a trace (one line: the file and what is wrong)."""


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel execution: ``ts``/``dur`` in µs, ``correlation`` the launch call's id (or None), ``device``
    the GPU it ran on (kineto's ``args.device``, nsys's ``deviceId``; None where the trace does not say)."""

    name: str
    ts: float
    dur: float
    correlation: int | None = None
    device: int | None = None


@dataclass(frozen=True)
class Span:
    """A named range, µs: a record_function / NVTX range on the host, or its GPU-side copy."""

    name: str
    ts: float
    end: float


@dataclass
class RankTrace:
    """What one rank's trace holds that ``cpbench profile --from`` needs.

    Attributes:
        path: the file read; label: how messages name this rank (``rank 0 (file.trace.json.gz)``).
        rank, world_size: from ``distributedInfo`` (torch.profiler) or the PID order (nsys); None unknown.
        group: what the ranks of one run share: ``(backend, world size)`` of the default group.
        process_groups: the rank's own process groups, ``pg_name -> ranks`` (kineto lists only the groups a rank is
            in, so two ranks of one run may list different ones; a group both list must hold the same ranks).
        start_us: absolute start of the trace, µs since the epoch (None when the trace does not say).
        kernels: GPU kernels in start order; launches: correlation id -> host µs of the launch call.
        host_ranges, gpu_ranges: annotation ranges (``ProfilerStep#N``, record_function, NVTX).
        host_events: CPU-side events seen (ops, launch calls, ranges), to tell an empty trace from a
            CPU-only one.
        malformed: kernel events left out for a missing or malformed name, start or duration (a negative or
            non-numeric one), counted so that none is dropped silently.
        rank_source: where ``rank`` came from: ``distributedInfo``, or ``file order`` / ``process order`` for
            traces that carry no rank, ``device order`` for the devices of one process's trace.
        counted: ``"kernels"``, or ``"attention calls"`` for a trace without GPU kernels whose attention-call
            ranges were made its kernels (cpbench's own profile on a CPU; ``torch_trace``).
    """

    path: str
    label: str
    source: str
    rank: int | None = None
    world_size: int | None = None
    group: tuple = ()
    process_groups: dict[str, tuple] = field(default_factory=dict)
    start_us: float | None = None
    kernels: list[Kernel] = field(default_factory=list)
    launches: dict[int, float] = field(default_factory=dict)
    host_ranges: list[Span] = field(default_factory=list)
    gpu_ranges: list[Span] = field(default_factory=list)
    host_events: int = 0
    malformed: int = 0
    rank_source: str = "distributedInfo"
    counted: str = "kernels"


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (at most 120 characters), or its type's name: for one-line errors."""
    text = str(e).strip().splitlines()
    return text[0][:120] if text else type(e).__name__


def nonneg_int(v) -> int | None:
    """``v`` as a non-negative int (an integral float too), else None."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def finite_number(v) -> bool:
    """True for an int or float (not a bool) that is neither NaN nor infinite."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
