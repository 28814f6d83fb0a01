"""Nsight Systems reports of an engine, read into :class:`~cpbench.studies.engine_traces.rank_trace.RankTrace` records: an
exported ``.sqlite`` with the standard library's sqlite3 (tables ``CUPTI_ACTIVITY_KIND_KERNEL``,
``CUPTI_ACTIVITY_KIND_RUNTIME``, ``NVTX_EVENTS``, ``StringIds``; times in ns); a ``.nsys-rep`` is first exported
with ``nsys export --type sqlite`` (nsys needed, no GPU). Each process that ran kernels is one rank, in PID order
(an nsys report holds no CP rank); a process that ran kernels on several GPUs is one rank per GPU, in process
then device order.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cpbench.studies.engine_traces.rank_trace import (Kernel, RankTrace, Span, TraceInputError, finite_number, first_line,
                                          nonneg_int)

NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (nsys's NVTX_EVENTS.eventType)
# the integer columns each query reads, in its column order (None: a text column)
KERNEL_INTS = ("start", "end", "correlationId", "globalPid", "deviceId", None)
RUNTIME_INTS = ("start", "correlationId", "globalTid")
NVTX_INTS = ("start", "end", None, "globalTid")


def _numbers(f: Path, table: str, columns: tuple, row: tuple) -> tuple:
    """``row`` unchanged when each of its integer ``columns`` holds a number or NULL. SQLite stores any type in any
    column, so a damaged or hand-made export may hold text there. Raises TraceInputError naming the column."""
    for col, v in zip(columns, row):
        if col is not None and v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
            raise TraceInputError(f"{str(f)!r} has text ({str(v)[:40]!r}) in {table}.{col}, an integer column: not an "
                                  "nsys export as nsys writes it; export the report again (nsys export --type sqlite)")
    return row


def read_nsys(f: str | Path, nsys: str | None = None) -> list[RankTrace]:
    """An Nsight Systems report: ``.sqlite`` read directly, ``.nsys-rep`` exported to a ``.sqlite`` beside
    it first (``nsys export --type sqlite``). One RankTrace per process and GPU that ran kernels.

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
        raise TraceInputError(f"{str(f)!r} is not an nsys SQLite export ({first_line(e)}): export it with "
                              "`nsys export --type sqlite`") from None


def is_current_export(sqlite: Path, rep: Path) -> bool:
    """True when ``sqlite`` exists and was written no earlier than the report ``rep`` (an export of it as it is)."""
    return sqlite.exists() and sqlite.stat().st_mtime >= rep.stat().st_mtime


def export_sqlite(rep: Path, nsys: str | None) -> Path:
    """``rep``'s SQLite export (made beside it, or reused when no older than ``rep``).

    Raises:
        TraceInputError: no nsys to export with (saying so when an older export lies beside ``rep``), or nsys
            failed.
    """
    import subprocess

    out = rep.with_suffix(".sqlite")
    if is_current_export(out, rep):
        return out
    if not nsys and out.exists():
        raise TraceInputError(f"{out.name!r} is older than {rep.name!r} (an export of an earlier recording) and nsys is "
                              f"not installed here to export it again: export it where nsys is (`nsys export --type "
                              f"sqlite --force-overwrite true {rep.name}`), or pass {str(out)!r} itself to read it as it is")
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
    cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    device = "k.deviceId" if "deviceId" in cols else "NULL"
    by_key: dict[tuple, RankTrace] = {}  # (pid, device) -> its trace
    rows = con.execute(f"SELECT k.start, k.end, k.correlationId, k.globalPid, {device}, s.value FROM "
                       "CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start")
    for row in rows:
        start, end, corr, gpid, dev, name = _numbers(f, "CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_INTS, row)
        if gpid is None:
            continue
        key = (_pid(gpid), nonneg_int(dev))
        t = by_key.get(key) or by_key.setdefault(key, RankTrace(path=str(f), label="", source="nsys"))
        if finite_number(start) and finite_number(end) and end >= start and isinstance(name, str) and name:
            t.kernels.append(Kernel(name, start / 1e3, (end - start) / 1e3, nonneg_int(corr), key[1]))
        else:
            t.malformed += 1
    by_pid: dict[int, list[RankTrace]] = {}  # a process's launch calls and ranges belong to each of its devices
    for (pid, _), t in sorted(by_key.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        by_pid.setdefault(pid, []).append(t)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for row in con.execute("SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                               "WHERE start IS NOT NULL AND correlationId IS NOT NULL AND globalTid IS NOT NULL"):
            start, corr, gtid = _numbers(f, "CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_INTS, row)
            for t in by_pid.get(_pid(gtid), ()):
                t.launches[corr] = start / 1e3
                t.host_events += 1
    if "NVTX_EVENTS" in tables:
        q = ("SELECT n.start, n.end, COALESCE(n.text, s.value), n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s "
             f"ON s.id = n.textId WHERE n.eventType IN {NVTX_RANGE_TYPES} AND n.start IS NOT NULL AND n.end IS NOT NULL "
             "AND n.globalTid IS NOT NULL")
        for row in con.execute(q):
            start, end, text, gtid = _numbers(f, "NVTX_EVENTS", NVTX_INTS, row)
            for t in by_pid.get(_pid(gtid), ()) if isinstance(text, str) and text else ():
                t.host_ranges.append(Span(text, start / 1e3, end / 1e3))
    if not by_key:
        raise TraceInputError(f"{str(f)!r} holds no GPU kernel: a report of a CPU-only program")
    out = [t for ts in by_pid.values() for t in ts if t.kernels]
    if not out:
        raise TraceInputError(f"{str(f)!r} holds no readable GPU kernel (every kernel row lacks a start, end or name)")
    several = any(len(ts) > 1 for ts in by_pid.values())
    for pid, ts in by_pid.items():
        for t in ts:
            dev = t.kernels[0].device if t.kernels else None
            t.label = f"pid {pid}{f' device {dev}' if several else ''} ({f.name})"
            t.rank_source = "process and device order" if several else "process order"
    for t in out:
        t.start_us = t.kernels[0].ts  # relative to the report's start: one report is one run
        t.rank = None
    return out
