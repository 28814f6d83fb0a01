"""Nsight Systems reports of an engine, read into :class:`~cpbench.profiles.engine_rank.RankTrace` records: an
exported ``.sqlite`` with the standard library's sqlite3 (tables ``CUPTI_ACTIVITY_KIND_KERNEL``,
``CUPTI_ACTIVITY_KIND_RUNTIME``, ``NVTX_EVENTS``, ``StringIds``; times in ns); a ``.nsys-rep`` is first exported
with ``nsys export --type sqlite`` (nsys needed, no GPU). Each process that ran kernels is one rank, in PID order
(an nsys report holds no CP rank).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cpbench.profiles.engine_rank import (Kernel, RankTrace, Span, TraceInputError, finite_number, first_line,
                                          nonneg_int)

NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (nsys's NVTX_EVENTS.eventType)


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
        raise TraceInputError(f"{str(f)!r} is not an nsys SQLite export ({first_line(e)}): export it with "
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
        if finite_number(start) and finite_number(end) and end >= start and isinstance(name, str) and name:
            t.kernels.append(Kernel(name, start / 1e3, (end - start) / 1e3, nonneg_int(corr)))
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
