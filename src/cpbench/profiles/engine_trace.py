"""Reading an engine's own traces, one :class:`RankTrace` per rank: torch.profiler Chrome traces and
Nsight Systems reports that cpbench did not write (``cpbench profile --from``).

* **torch.profiler** (``*.trace.json`` / ``*.trace.json.gz``, as SGLang's ``/start_profile`` or
  ``SGLANG_TORCH_PROFILER_DIR`` write one per rank): streamed with ijson, so a multi-GB trace is never held
  whole in memory; only GPU kernels, launch calls and annotation ranges are kept. The rank, world size and
  process groups come from kineto's ``distributedInfo``; the start time from ``baseTimeNanoseconds`` plus
  the first event's ``ts`` (older kineto writes absolute µs in ``ts`` and no base).
* **Nsight Systems**: an exported ``.sqlite`` is read with the standard library's sqlite3 (tables
  ``CUPTI_ACTIVITY_KIND_KERNEL``, ``CUPTI_ACTIVITY_KIND_RUNTIME``, ``NVTX_EVENTS``, ``StringIds``; times in
  ns). A ``.nsys-rep`` is first exported with ``nsys export --type sqlite`` (nsys needed, no GPU). Each
  process that ran kernels is one rank, in PID order (an nsys report holds no CP rank).

Every reader raises :class:`TraceInputError` (a CpbenchInputError: one line, exit 2) for a file that is
not a trace of its kind, a truncated gz, or a trace without GPU activity (a CPU-only program).
"""

from __future__ import annotations

import gzip
import sqlite3
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from cpbench.errors import CpbenchInputError

MAX_START_SKEW_S = 600.0  # ranks of one profiled run start within this; farther apart is another run
KERNEL_CAT = "kernel"
HOST_RANGE_CATS = ("user_annotation",)  # record_function ranges and ProfilerStep#N (host side)
GPU_RANGE_CATS = ("gpu_user_annotation",)  # their GPU-side copies
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (nsys's NVTX_EVENTS.eventType)


class TraceInputError(CpbenchInputError):
    """A file given to ``--from`` that cannot be read as a trace (one line: the file and what is wrong)."""


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel execution: ``ts``/``dur`` in µs, ``correlation`` the launch call's id (or None)."""

    name: str
    ts: float
    dur: float
    correlation: int | None = None


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
        group: the process-group description the ranks of one run share (backend, world size, groups).
        start_us: absolute start of the trace, µs since the epoch (None when the trace does not say).
        kernels: GPU kernels in start order; launches: correlation id -> host µs of the launch call.
        host_ranges, gpu_ranges: annotation ranges (``ProfilerStep#N``, record_function, NVTX).
        host_events: CPU-side events seen (ops, launch calls, ranges), to tell an empty trace from a
            CPU-only one.
        malformed: kernel events left out for a missing or malformed name, start or duration (a negative or
            non-numeric one), counted so that none is dropped silently.
        rank_source: where ``rank`` came from: ``distributedInfo``, or ``file order`` / ``process order`` for
            traces that carry no rank.
    """

    path: str
    label: str
    source: str
    rank: int | None = None
    world_size: int | None = None
    group: tuple = ()
    start_us: float | None = None
    kernels: list[Kernel] = field(default_factory=list)
    launches: dict[int, float] = field(default_factory=dict)
    host_ranges: list[Span] = field(default_factory=list)
    gpu_ranges: list[Span] = field(default_factory=list)
    host_events: int = 0
    malformed: int = 0
    rank_source: str = "distributedInfo"


def read_traces(paths: list[str | Path], nsys: str | None = None) -> list[RankTrace]:
    """Read every ``--from`` path (a file, or a directory of ``*.json``/``*.json.gz``/``*.sqlite``/
    ``*.nsys-rep`` files; a report whose ``.sqlite`` export lies beside it is read once) into rank traces,
    ordered by rank.

    Args:
        paths: files or directories.
        nsys: the ``nsys`` executable, needed only for ``.nsys-rep`` files.
    Raises:
        TraceInputError: a path is missing, a directory holds no trace, a file is not a trace, two files
            claim one rank, or the files come from different runs (see :func:`check_one_run`).
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and _kind(f))
            exported = {f.with_suffix("") for f in found if f.suffix.lower() == ".sqlite"}
            found = [f for f in found if f.suffix.lower() not in (".nsys-rep", ".qdrep") or f.with_suffix("") not in exported]
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
            traces.append(read_torch_trace(f))
        else:
            traces += read_nsys(f, nsys)
    if any(t.rank is None for t in traces):
        if any(t.rank is not None for t in traces):
            a = next(t for t in traces if t.rank is None)
            raise TraceInputError(f"{a.path!r} names no rank (no distributedInfo) while others do: traces of different "
                                  "runs are mixed; give one run's files")
        for i, t in enumerate(traces):
            t.rank, t.rank_source = i, ("process order" if t.source == "nsys" else "file order")
    check_one_run(traces)
    return sorted(traces, key=lambda t: (t.rank is None, t.rank))


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


def _open(f: Path):
    with open(f, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(f, "rb") if gz else open(f, "rb")


def read_torch_trace(f: str | Path) -> RankTrace:
    """One torch.profiler Chrome trace (plain or gz), streamed (ijson).

    Kept: ``kernel`` events (name, ts, dur µs, ``args.correlation``), launch calls (``cuda_runtime`` /
    ``cuda_driver``: correlation -> ts), ``user_annotation`` and ``gpu_user_annotation`` ranges.
    Raises:
        TraceInputError: not JSON, a truncated gz, no ``traceEvents``, or no GPU kernel (CPU-only program).
    """
    import ijson

    f = Path(f)
    t = RankTrace(path=str(f), label=f.name, source="torch.profiler")
    meta = _torch_meta(f)
    info = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    t.rank, t.world_size = _int(info.get("rank")), _int(info.get("world_size"))
    t.group = (info.get("backend"), t.world_size, repr(info.get("pg_config")))
    base = meta.get("baseTimeNanoseconds")
    first = float("inf")
    seen_events = False
    try:
        with _open(f) as fh:
            for ev in ijson.items(fh, "traceEvents.item", use_float=True):
                seen_events = True
                if not isinstance(ev, dict) or ev.get("ph", "X") != "X":
                    continue
                ts, dur, name = ev.get("ts"), ev.get("dur"), ev.get("name")
                cat = str(ev.get("cat") or "").lower()
                good = _number(ts) and isinstance(name, str) and name
                if cat == KERNEL_CAT:
                    if good and _number(dur) and dur >= 0:
                        first = min(first, ts)
                        t.kernels.append(Kernel(name, float(ts), float(dur), _correlation(ev)))
                    else:
                        t.malformed += 1
                    continue
                if not good:
                    continue
                first = min(first, ts)
                dur = float(dur) if _number(dur) and dur >= 0 else 0.0
                t.host_events += 1
                if cat in LAUNCH_CATS and _correlation(ev) is not None:
                    t.launches[_correlation(ev)] = float(ts)
                elif cat in HOST_RANGE_CATS:
                    t.host_ranges.append(Span(name, float(ts), float(ts) + dur))
                elif cat in GPU_RANGE_CATS:
                    t.gpu_ranges.append(Span(name, float(ts), float(ts) + dur))
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise _unreadable(f, e) from None
    if not seen_events:
        raise TraceInputError(f"{str(f)!r} has no traceEvents: it is not a torch.profiler trace")
    if not t.kernels:
        bad = f", {t.malformed} kernel events without a name, start or duration" if t.malformed else ""
        raise TraceInputError(f"{str(f)!r} holds no GPU kernel ({t.host_events} CPU events{bad}): a trace of a "
                              "CPU-only program, or profiled without ProfilerActivity.CUDA")
    if first != float("inf"):
        t.start_us = (base / 1000.0 if isinstance(base, (int, float)) else 0.0) + first
    t.kernels.sort(key=lambda k: k.ts)
    if t.rank is not None:
        t.label = f"rank {t.rank} ({f.name})"
    return t


def _torch_meta(f: Path) -> dict:
    """The top-level keys kineto writes before ``traceEvents`` (distributedInfo, baseTimeNanoseconds);
    stops at ``traceEvents`` so the events are not parsed twice."""
    import ijson

    meta: dict = {}
    try:
        with _open(f) as fh:
            parser = ijson.parse(fh, use_float=True)
            builder, key = None, None
            for prefix, event, value in parser:
                if prefix == "" and event == "map_key":
                    if value == "traceEvents":
                        break
                    key, builder = value, ijson.ObjectBuilder()
                elif builder is not None and prefix != "":
                    builder.event(event, value)
                    if prefix == key and event not in ("start_map", "start_array", "map_key"):
                        meta[key], builder = builder.value, None
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise _unreadable(f, e) from None
    return meta


def _unreadable(f: Path, e: BaseException) -> TraceInputError:
    """The one-line error for a torch trace the parser or gzip gave up on: cut short, or not JSON at all."""
    why = _reason(e)
    if isinstance(e, EOFError) or "premature EOF" in why or "end-of-stream" in why:
        return TraceInputError(f"{str(f)!r} is cut short ({why}): give the whole file as the profiler wrote it")
    return TraceInputError(f"{str(f)!r} is not a torch.profiler trace ({why}): give the file as the profiler wrote "
                           "it (JSON, plain or gz)")


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:120] if text else type(e).__name__


def _int(v) -> int | None:
    """``v`` as a non-negative int (an integral float too), else None."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _correlation(ev: dict) -> int | None:
    args = ev.get("args")
    return _int(args.get("correlation")) if isinstance(args, dict) else None


def read_nsys(f: str | Path, nsys: str | None = None) -> list[RankTrace]:
    """An Nsight Systems report: ``.sqlite`` read directly, ``.nsys-rep`` exported to a ``.sqlite`` beside
    it first (``nsys export --type sqlite``). One RankTrace per process that ran kernels.

    Raises:
        TraceInputError: not an nsys database, no kernel table (profiled without CUDA tracing), or a
            ``.nsys-rep`` without an ``nsys`` to export it.
    """
    f = Path(f)
    if not f.name.lower().endswith(".sqlite"):
        f = export_sqlite(f, nsys)
    try:
        con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        try:
            return _read_nsys_db(con, f)
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise TraceInputError(f"{str(f)!r} is not an nsys SQLite export ({_reason(e)}): export it with "
                              "`nsys export --type sqlite`") from None


def export_sqlite(rep: Path, nsys: str | None) -> Path:
    """``rep``'s SQLite export (made beside it, or reused when newer than ``rep``)."""
    import subprocess

    out = rep.with_suffix(".sqlite")
    if out.exists() and out.stat().st_mtime >= rep.stat().st_mtime:
        return out
    if not nsys:
        raise TraceInputError(f"{str(rep)!r} is an nsys report and nsys is not installed here: install Nsight "
                              "Systems, or export it where nsys is (`nsys export --type sqlite`) and pass the .sqlite")
    r = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out),
                        str(rep)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not out.exists():
        last = (r.stderr or r.stdout).strip().splitlines()
        raise TraceInputError(f"nsys could not export {str(rep)!r}: {last[-1] if last else 'no output'}")
    return out


def _pid(global_id: int) -> int:
    """The PID inside nsys's serialised ``globalPid`` / ``globalTid`` (bits 24-47)."""
    return (int(global_id) >> 24) & 0xFFFFFF


def _read_nsys_db(con: sqlite3.Connection, f: Path) -> list[RankTrace]:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "StringIds" not in tables:
        raise TraceInputError(f"{str(f)!r} is an SQLite file but not an nsys export (no StringIds table)")
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        raise TraceInputError(f"{str(f)!r} holds no GPU kernel: a report of a CPU-only program, or recorded "
                              "without CUDA tracing (nsys profile --trace cuda)")
    by_pid: dict[int, RankTrace] = {}

    def trace(pid: int) -> RankTrace:
        if pid not in by_pid:
            by_pid[pid] = RankTrace(path=str(f), label=f"pid {pid} ({f.name})", source="nsys")
        return by_pid[pid]

    rows = con.execute("SELECT k.start, k.end, k.correlationId, k.globalPid, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                       "LEFT JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start")
    for start, end, corr, gpid, name in rows:
        if gpid is None:
            continue
        t = trace(_pid(gpid))
        if _number(start) and _number(end) and end >= start and isinstance(name, str) and name:
            t.kernels.append(Kernel(name, start / 1e3, (end - start) / 1e3, _int(corr)))
        else:
            t.malformed += 1
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for start, corr, gtid in con.execute("SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                             "WHERE start IS NOT NULL AND correlationId IS NOT NULL AND globalTid IS NOT NULL"):
            if _pid(gtid) in by_pid:
                by_pid[_pid(gtid)].launches[corr] = start / 1e3
                by_pid[_pid(gtid)].host_events += 1
    if "NVTX_EVENTS" in tables:
        q = ("SELECT n.start, n.end, COALESCE(n.text, s.value), n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s "
             f"ON s.id = n.textId WHERE n.eventType IN {NVTX_RANGE_TYPES} AND n.start IS NOT NULL AND n.end IS NOT NULL "
             "AND n.globalTid IS NOT NULL")
        for start, end, text, gtid in con.execute(q):
            if _pid(gtid) in by_pid and text:
                by_pid[_pid(gtid)].host_ranges.append(Span(text, start / 1e3, end / 1e3))
    if not by_pid:
        raise TraceInputError(f"{str(f)!r} holds no GPU kernel: a report of a CPU-only program")
    out = [by_pid[p] for p in sorted(by_pid) if by_pid[p].kernels]
    if not out:
        raise TraceInputError(f"{str(f)!r} holds no readable GPU kernel (every kernel row lacks a start, end or name)")
    for t in out:
        t.start_us = t.kernels[0].ts  # relative to the report's start: one report is one run
        t.rank = None
    return out


def check_one_run(traces: list[RankTrace]) -> None:
    """Refuse ranks that cannot belong to one profiled run.

    Raises:
        TraceInputError: two files claim the same rank; the files disagree on the process groups
            (``distributedInfo``: backend, world size, groups); or their start times lie more than
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
    groups = {t.group for t in torch_traces}
    if len(groups) > 1:
        a = torch_traces[0]
        b = next(t for t in torch_traces if t.group != a.group)
        raise TraceInputError(f"{a.path!r} and {b.path!r} come from different process groups (distributedInfo "
                              "differs): traces of different runs are mixed; give one run's files")
    starts = [(t.start_us, t) for t in torch_traces if t.start_us]
    if len(starts) > 1:
        (lo, a), (hi, b) = min(starts, key=lambda s: s[0]), max(starts, key=lambda s: s[0])
        if (hi - lo) / 1e6 > MAX_START_SKEW_S:
            raise TraceInputError(f"{a.path!r} and {b.path!r} start {(hi - lo) / 1e6:.0f} s apart (more than "
                                  f"{MAX_START_SKEW_S:.0f} s): traces of different runs are mixed; give one run's files")
