"""Reading an engine's own traces, one :class:`RankTrace` per rank: torch.profiler Chrome traces and
Nsight Systems reports that cpbench did not write (``cpbench profile --from``): which files to read
(:func:`read_traces`), and whether they can be one run (:func:`check_one_run`).

* **torch.profiler**: :mod:`cpbench.studies.engine_traces.torch_trace` (one file per rank, streamed);
* **Nsight Systems**: :mod:`cpbench.studies.engine_traces.nsys_trace` (``.sqlite``, or a ``.nsys-rep`` exported first).

Every reader raises :class:`TraceInputError` (a CpbenchInputError: one line, exit 2) for a file that is
not a trace of its kind, a truncated gz, or a trace without GPU activity (a CPU-only program).
"""

from __future__ import annotations

import re
from pathlib import Path

from cpbench.studies.engine_traces.nsys_trace import export_sqlite, is_current_export, read_nsys
from cpbench.studies.engine_traces.rank_trace import MAX_START_SKEW_S, Kernel, RankTrace, Span, TraceInputError
from cpbench.studies.engine_traces.torch_trace import read_torch_trace, split_by_device


def read_traces(paths: list[str | Path], nsys: str | None = None) -> list[RankTrace]:
    """Read every ``--from`` path (a file, or a directory of ``*.json``/``*.json.gz``/``*.sqlite``/
    ``*.nsys-rep`` files; a report whose ``.sqlite`` export lies beside it is read once: from the export when it is
    no older than the report, else from the report) into rank traces, ordered by rank.

    Args:
        paths: files or directories.
        nsys: the ``nsys`` executable, needed only for ``.nsys-rep`` files.
    Raises:
        TraceInputError: a path is missing, a directory holds no trace, a file is not a trace, a trace of
            several devices is given beside others (alone, each device is a rank), two files claim one rank, or the files come from different runs (see :func:`check_one_run`).
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and _kind(f))
            reports = {f.with_suffix(""): f for f in found if f.suffix.lower() in (".nsys-rep", ".qdrep")}
            # a report and its export: read once, from the export where it is current, else from the report
            # (exported again, or refused as out of date, as when the report is given as a file)
            found = [f for f in found if not (f.suffix.lower() == ".sqlite" and f.with_suffix("") in reports and not
                                              is_current_export(f, reports[f.with_suffix("")]))
                     and not (f in reports.values() and is_current_export(f.with_suffix(".sqlite"), f))]
            if not found:
                raise TraceInputError(f"{str(p)!r} holds no trace (*.trace.json[.gz], *.sqlite, *.nsys-rep): "
                                      "give the directory the profiler wrote")
            files += found
        elif p.is_file():
            files.append(p)
        elif p.exists():
            raise TraceInputError(f"{str(p)!r} is not a regular file (a FIFO or a device?): give a trace file or a "
                                  "directory of them")
        else:
            raise TraceInputError(f"no such file or directory: {str(p)!r}")
    seen: dict[Path, Path] = {}
    for f in files:
        if f.resolve() in seen:
            raise TraceInputError(f"{str(seen[f.resolve()])!r} is given twice (as {str(f)!r}): give each trace once")
        seen[f.resolve()] = f
    kinds = {(_kind(f) or _sniff(f)) for f in files}
    if len(kinds) > 1:
        raise TraceInputError("torch.profiler traces and nsys reports given together: they number ranks differently "
                              "and cannot be told apart as one run; read each kind in its own call")
    if kinds == {"nsys"} and len(files) > 1:
        raise TraceInputError(f"{len(files)} nsys reports given: one report holds every process it traced; read one "
                              "report per call")
    traces: list[RankTrace] = []
    for f in files:
        kind = _kind(f) or _sniff(f)
        if kind == "torch":
            parts = split_by_device(read_torch_trace(f))
            if len(parts) > 1 and len(files) > 1:
                devices = ", ".join(str(p.kernels[0].device) for p in parts)
                raise TraceInputError(f"{str(f)!r} holds kernels of {len(parts)} devices ({devices}): give it alone "
                                      "(one process drove several GPUs; its devices are then read as its ranks)")
            traces += parts
        else:
            traces += read_nsys(f, nsys)
    if any(t.rank is None for t in traces):
        if any(t.rank is not None for t in traces):
            a = next(t for t in traces if t.rank is None)
            raise TraceInputError(f"{a.path!r} names no rank (no distributedInfo) while others do: traces of different "
                                  "runs are mixed; give one run's files")
        _number_ranks(traces)
    check_one_run(traces)
    return sorted(traces, key=lambda t: (t.rank is None, t.rank))


def _number_ranks(traces: list[RankTrace]) -> None:
    """Ranks for traces that name none: an nsys report's in process (and device) order; torch traces by the last
    number in each file name (``...-TP-10.trace.json.gz`` is 10th, after 2: numbers, not text, are sorted) where every
    name has a different one (``rank_source`` ``file name``), else in file order."""
    if all(t.source == "nsys" for t in traces):
        for i, t in enumerate(traces):
            t.rank = i
        return
    numbers = [_name_number(t.path) for t in traces]
    by_name = None not in numbers and len(set(numbers)) == len(numbers)
    order = sorted(range(len(traces)), key=lambda i: numbers[i]) if by_name else range(len(traces))
    for rank, i in enumerate(order):
        traces[i].rank, traces[i].rank_source = rank, ("file name" if by_name else "file order")


def _name_number(path: str) -> int | None:
    """The last run of digits in a trace's file name without its extensions (``engine-r10.trace.json.gz`` -> 10)."""
    stem = Path(path).name
    for ext in (".gz", ".json", ".trace", ".pt"):
        stem = stem[:-len(ext)] if stem.lower().endswith(ext) else stem
    digits = re.findall(r"\d+", stem)
    return int(digits[-1]) if digits else None


def _kind(f: Path) -> str | None:
    name = f.name.lower()
    if name.endswith((".json", ".json.gz")):
        return "torch"
    if name.endswith((".sqlite", ".nsys-rep", ".qdrep")):
        return "nsys"
    return None


def _sniff(f: Path) -> str:
    """"torch" or "nsys" by the first bytes of a file whose name does not say."""
    with open(f, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"SQLite format 3"):
        return "nsys"
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] == b"{":
        return "torch"
    raise TraceInputError(f"{str(f)!r} is neither a torch.profiler trace (JSON, plain or gz) nor an nsys "
                          "report (.nsys-rep, .sqlite): give the files the profiler wrote")


def check_one_run(traces: list[RankTrace]) -> None:
    """Refuse ranks that cannot belong to one profiled run.

    Raises:
        TraceInputError: two files claim the same rank; the files disagree on the process groups
            (``distributedInfo``: the default group's backend or world size, or the ranks of a group both list); or their start times lie more than
            :data:`MAX_START_SKEW_S` apart. The message names the files.
    """
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank is not None and t.rank in by_rank and t.source == "torch.profiler":
            raise TraceInputError(f"{by_rank[t.rank].path!r} and {t.path!r} are both rank {t.rank}: traces of "
                                  "different runs are mixed; give one run's files")
        if t.rank is not None:
            by_rank.setdefault(t.rank, t)
    torch_traces = [t for t in traces if t.source == "torch.profiler"]
    _check_groups(torch_traces)
    starts = [(t.start_us, t) for t in torch_traces if t.start_us]
    if len(starts) > 1:
        (lo, a), (hi, b) = min(starts, key=lambda s: s[0]), max(starts, key=lambda s: s[0])
        if (hi - lo) / 1e6 > MAX_START_SKEW_S:
            raise TraceInputError(f"{a.path!r} and {b.path!r} start {(hi - lo) / 1e6:.0f} s apart (more than "
                                  f"{MAX_START_SKEW_S:.0f} s): traces of different runs are mixed; give one run's files")



def _check_groups(traces: list[RankTrace]) -> None:
    """Refuse torch traces whose default groups differ (backend, world size) or that list one process group (by
    ``pg_name``) with different ranks. A group only one of them lists is no conflict: kineto records a rank's own
    groups, and ranks of one run sit in different subgroups."""
    for b in traces[1:]:
        a = traces[0]
        if a.group != b.group:
            raise TraceInputError(f"{a.path!r} and {b.path!r} come from different process groups ({_group(a)} against "
                                  f"{_group(b)}): traces of different runs are mixed; give one run's files")
    seen: dict[str, tuple[tuple, RankTrace]] = {}
    for t in traces:
        for name, ranks in t.process_groups.items():
            first = seen.setdefault(name, (ranks, t))
            if first[0] != ranks:
                raise TraceInputError(f"{first[1].path!r} and {t.path!r} disagree on process group {name!r} (ranks "
                                      f"{list(first[0])} against {list(ranks)}): traces of different runs are mixed; "
                                      "give one run's files")


def _group(t: RankTrace) -> str:
    backend, world = (tuple(t.group) + (None, None))[:2]
    return f"{backend or 'no backend'} with {world if world is not None else '?'} ranks"


__all__ = ["MAX_START_SKEW_S", "Kernel", "RankTrace", "Span", "TraceInputError", "check_one_run", "export_sqlite",
           "read_nsys", "read_torch_trace", "read_traces"]
