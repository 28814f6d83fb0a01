"""The run directory: one class owns every file name, the lock, appending rows, the final tables,
the manifest and reading (old schema versions migrated). No torch here.

Layout::

    <run>/results.jsonl    one row per line; a cell's rows appended in one write and fsync'ed as measured
    <run>/results.parquet  deduplicated table, written when a sweep ends (results.csv: the same)
    <run>/manifest.json    schema version, environment, config, wall times, resumes
    <run>/profiles/        traces          <run>/plots/  PNG + SVG         <run>/report.md
    <run>/.lock            held (flock) by the sweep writing the directory
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cpbench.domain.modes import Status
from cpbench.results.bad_rows import drop_bad_rows
from cpbench.results.planned import valid_planned_cells
from cpbench.results.schema import (CPU_MEM_REASON, SCHEMA_VERSION, V2_DEFAULTS, V2_RENAMED, V3_DEFAULTS, check_row,
                                    migrate_row, non_numeric, renamed_backend, renamed_backends, renamed_command,
                                    row_key)
from cpbench.errors import CpbenchInputError, CpbenchWarning

if TYPE_CHECKING:  # pandas (and scipy, through derive) are imported where a table is built: a rank process
    import pandas as pd  # that only appends rows starts without them

LOCK_RETRY_S = 0.5  # how long lock() waits out a reader's momentary shared lock (RunDir.writer), s
_WARNED: set[tuple[str, tuple[int, ...]]] = set()



RUNS_ROOT = Path("runs")  # where a command writes without --out (relative to the working directory)


def default_run_dir(kind: str = "") -> Path:
    """Where a command writes without --out: ``runs/<YYYYmmdd-HHMMSS>`` for a sweep, ``runs/<kind>-<...>``
    for ``profile`` and ``explain`` (the one spelling of the default run-directory name)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return RUNS_ROOT / (f"{kind}-{stamp}" if kind else stamp)


def out_dir(out: str | Path | None, kind: str = "") -> Path:
    """The run directory an ``--out`` value names (:func:`default_run_dir` when None).

    Raises:
        CpbenchInputError: ``out`` names an existing file (the one wording of that refusal).
    """
    d = Path(out) if out else default_run_dir(kind)
    if d.exists() and not d.is_dir():
        raise CpbenchInputError(f"--out {str(d)!r} is a file: pass a directory path")
    return d


class RunDir:
    """A run directory (see the module docstring). ``RunDir(path)`` only names it; :meth:`create`
    makes or reopens one for writing and takes its lock; :meth:`load` reads one."""

    RESULTS = "results.jsonl"
    PARQUET = "results.parquet"
    CSV = "results.csv"
    MANIFEST = "manifest.json"
    REPORT = "report.md"
    PLOTS = "plots"
    PROFILES = "profiles"
    LOCK = ".lock"

    FILES = (RESULTS, PARQUET, CSV, MANIFEST, REPORT)  # what `compare --out` must never overwrite

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.results, self.parquet, self.csv = (self.path / n for n in (self.RESULTS, self.PARQUET, self.CSV))
        self.manifest_path, self.report = self.path / self.MANIFEST, self.path / self.REPORT
        self.plots, self.profiles = self.path / self.PLOTS, self.path / self.PROFILES
        self._lock_fd: int | None = None

    def is_run_dir(self) -> bool:
        """True when the directory already holds a run (results or a manifest)."""
        return self.results.exists() or self.manifest_path.exists()

    def __str__(self) -> str:
        return str(self.path)

    def finished(self) -> bool:
        """True when the last sweep into this directory ran to its end: a sweep writes ``results.parquet`` once
        every cell is measured, so an interrupted one leaves none, or one older than the last row of
        ``results.jsonl`` (a resume stopped in turn). A directory with only a parquet (a committed run) is
        finished."""
        if not self.parquet.is_file():
            return False
        return not self.results.exists() or self.parquet.stat().st_mtime_ns >= self.results.stat().st_mtime_ns

    def runs_inside(self) -> list["RunDir"]:
        """The run directories directly inside this one (e.g. ``runs/``), oldest first by the time their
        results were last written; [] when this is a run itself or holds none."""
        if self.is_run_dir() or not self.path.is_dir():
            return []
        runs = [RunDir(p) for p in self.path.iterdir() if p.is_dir() and RunDir(p).is_run_dir()]
        stamp = lambda r: max((f.stat().st_mtime for f in (r.results, r.parquet, r.manifest_path)  # noqa: E731
                               if f.exists()), default=0.0)
        return sorted(runs, key=lambda r: (stamp(r), r.path.name))

    # -- lifecycle -----------------------------------------------------------------------------------
    @classmethod
    def create(cls, out: str | Path | None, resume: bool) -> "RunDir":
        """Create (or, with ``resume``, reopen) a run directory for writing and lock it; default
        ``runs/<YYYYmmdd-HHMMSS>``.

        Raises:
            CpbenchInputError: ``out`` is a file, is not writable, already holds results without
                ``resume``, holds other run directories, ``resume`` names a directory without results, or
                another sweep holds it.
        """
        d = out_dir(out)
        run = cls(d)
        has_rows = run.results.exists()
        other = next((c for c in sorted(d.iterdir()) if c.is_dir() and ((c / cls.RESULTS).exists()
                                                                         or (c / cls.MANIFEST).exists())), None) \
            if d.is_dir() and not has_rows and not resume else None
        if other is not None:
            raise CpbenchInputError(f"--out {str(d)!r} holds other runs (e.g. {other.name!r}): give this run a "
                                    f"directory of its own, e.g. {str(d / 'new-run')!r}")
        if resume and not has_rows and run.parquet.exists():  # a committed or copied run: its rows live in
            raise CpbenchInputError(                              # the parquet, which a resume would rewrite
                f"--resume: {str(d)!r} holds {cls.PARQUET} but no {cls.RESULTS} (a committed or copied run): a "
                "resume appends to results.jsonl and would replace the parquet; sweep into a new --out")
        if not resume and not has_rows and run.parquet.exists():
            raise CpbenchInputError(f"{str(d)!r} already holds results ({cls.PARQUET}): pick another --out")
        if resume and not has_rows and run.manifest_path.exists():
            has_rows = True  # interrupted before its first row: resume it from the start
        elif resume and not has_rows:
            raise CpbenchInputError(f"--resume: {str(d)!r} holds no {cls.RESULTS}: pass the --out of the sweep to resume")
        try:
            d.mkdir(parents=True, exist_ok=True)
            run.lock()
        except OSError as e:
            raise CpbenchInputError(f"cannot write to {str(d)!r} ({e.strerror or e}): choose another --out") from None
        if has_rows and not resume:
            run.unlock()
            raise CpbenchInputError(f"{str(d)!r} already holds results: add --resume to continue it (resume=True from Python), "
                                    "or pick another --out")
        if resume:
            old = run.read_manifest().get("schema_version", SCHEMA_VERSION)
            if old != SCHEMA_VERSION:
                run.unlock()
                raise CpbenchInputError(f"--resume: {str(d)!r} was written by results schema {old}, this cpbench "
                                        f"writes {SCHEMA_VERSION}: start a new --out (the old run still reports)")
        return run

    def lock(self) -> None:
        """Take the directory's exclusive lock (``.lock``, flock). Raises CpbenchInputError naming the
        holder when another process (or another RunDir in this one) holds it. A reader's momentary shared
        lock (:meth:`writer`) is waited out: the attempt is repeated for up to :data:`LOCK_RETRY_S`."""
        import fcntl

        fd = os.open(self.path / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + LOCK_RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise CpbenchInputError(f"{str(self.path)!r} is being written by {holder}: wait for it to finish, "
                                    "or pick another --out") from None
        os.ftruncate(fd, 0)
        command = os.environ.get("CPBENCH_COMMAND") or " ".join(["cpbench", *sys.argv[1:]])  # a rank: the launch's
        os.pwrite(fd, f"pid {os.getpid()} ({command[:200]})".encode("utf-8", "backslashreplace"), 0)
        self._lock_fd = fd

    @contextmanager
    def held(self):
        """Create the directory and hold its lock for the ``with`` block (``profile`` and ``explain``, which
        write into a run directory as a sweep does). Raises CpbenchInputError as :meth:`lock` does, or when
        the directory cannot be created."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CpbenchInputError(f"cannot write to {str(self.path)!r} ({e.strerror or e}): choose another --out") from None
        self.lock()
        try:
            yield self
        finally:
            self.unlock()

    def writer(self) -> str | None:
        """Who holds the directory's lock (a sweep still writing it): the holder recorded in ``.lock``, or None
        when nobody holds it. Tries a shared non-blocking flock and releases it at once: never waits, never
        keeps the lock (a reader must not stop a sweep from starting)."""
        import fcntl

        try:
            fd = os.open(self.path / self.LOCK, os.O_RDONLY)
        except OSError:  # no lock file (a copied run), or not readable: nothing to say
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
        except OSError:
            return None
        finally:
            os.close(fd)  # closing releases a shared lock taken above
        return None

    def unlock(self) -> None:
        """Release the lock; the holder line in ``.lock`` is cleared first (the file stays: removing it could
        let two processes lock two different files of one name)."""
        if self._lock_fd is not None:
            try:
                os.ftruncate(self._lock_fd, 0)
            except OSError:
                pass
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    # -- rows ----------------------------------------------------------------------------------------
    def append(self, row: dict) -> None:
        """Append one row to ``results.jsonl`` and fsync it (:meth:`append_rows` of one row)."""
        self.append_rows([row])

    def append_rows(self, rows: list[dict]) -> None:
        """Append ``rows`` (a cell's rows on one backend) to ``results.jsonl`` in one write and fsync it, so a
        sweep killed meanwhile leaves the cell whole or absent, never in part. A torn last line (a kill
        mid-write on a machine that splits writes) is cut off first, so the new rows start their own line.

        Raises:
            ValueError: a row breaks the schema (``schema.check_row``: an unknown or derived column, a
                wrong type, a missing key column); nothing is written.
            OSError: the file cannot be written (a full disk), naming it.
        """
        for row in rows:
            problems = check_row(row)
            if problems:
                raise ValueError(f"row not written, it breaks the results schema: {'; '.join(problems[:5])}")
        text = "".join(json.dumps(_jsonable(row)) + "\n" for row in rows).encode()
        with naming(self.results), open(self.results, "ab+") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.seek(0)
                    f.truncate(f.read().rfind(b"\n") + 1)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def rows(self) -> list[dict]:
        """Every row of ``results.jsonl``, migrated to the current schema (see :func:`read_jsonl`)."""
        return [migrate_row(r) for r in read_jsonl(self.results)]

    def latest_rows(self) -> list[dict]:
        """Rows deduplicated by row key, the last written winning (a resume may re-measure a row)."""
        return [r for _, r in self.numbered_rows()]

    def numbered_rows(self) -> list[tuple[int, dict]]:
        """``(line number in results.jsonl, row)`` of :meth:`latest_rows`, in the same order (messages name a
        row by its line)."""
        latest = {}
        for line, row in _numbered_jsonl(self.results):
            row = migrate_row(row)
            latest[row_key(row)] = (line, row)
        return list(latest.values())

    def done_keys(self) -> set:
        """Keys of rows already measured (for --resume); a cell skipped over the token cap is not
        measured, so a resume with a larger ``--max-prefill-tokens`` runs it."""
        return {row_key(r) for r in self.rows() if r.get("status") != Status.SKIPPED}

    def finalize(self) -> pd.DataFrame:
        """Deduplicate ``results.jsonl`` and write ``results.parquet`` / ``results.csv`` (what was measured);
        return the frame with the derived columns (:func:`~cpbench.results.derived.derive`), as :meth:`load` would."""
        from cpbench.results.derived import derive

        df = self.write_tables(self.latest_rows())
        return derive(df, self.read_manifest()) if not df.empty else df

    def write_tables(self, rows: list[dict]) -> pd.DataFrame:
        """Write ``rows`` as ``results.parquet`` and ``results.csv`` (samples as a JSON list in the CSV)."""
        import pandas as pd

        df = pd.DataFrame(rows)
        if df.empty:
            return df
        tmp = self.parquet.with_name(self.parquet.name + ".tmp")
        try:  # written aside, then renamed: a failure never leaves a truncated parquet over a readable run
            with open(tmp, "wb") as f:  # a file, not a path: pyarrow encodes paths as strict UTF-8
                df.to_parquet(f, index=False)
            os.replace(tmp, self.parquet)
        except Exception as e:  # pyarrow refuses a column of mixed types (a hand-edited row)
            tmp.unlink(missing_ok=True)
            self.parquet.unlink(missing_ok=True)  # stale: results.jsonl holds every row and is read instead
            bad = non_numeric(df)
            what = (f"column {bad[0]!r} holds {bad[1]!r} in {bad[2]} row(s), not a number" if bad else
                    f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
            warnings.warn(f"{self.parquet} not written ({what}): every row stays in {self.results}, which report "
                          "and compare read; fix or delete that row to get the parquet back", CpbenchWarning,
                          stacklevel=2)
        csv = df.copy()
        if "samples_us" in csv:
            csv["samples_us"] = csv["samples_us"].map(
                lambda s: json.dumps([float(x) for x in s]) if hasattr(s, "__len__") and not isinstance(s, str) else "")
        with naming(self.csv):
            csv.to_csv(self.csv, index=False)
        return df

    # -- manifest ------------------------------------------------------------------------------------
    def read_manifest(self) -> dict:
        """``manifest.json`` as a dict ({} when absent); see :func:`read_manifest`."""
        return read_manifest(self.manifest_path)

    def write_manifest(self, manifest: dict) -> None:
        """Write ``manifest`` as ``manifest.json``, atomically (a kill leaves the old file or the new one).
        What a sweep records, and how a resume merges it, is commands/manifest.py's business."""
        _write_json(self.manifest_path, manifest)

    # -- reading -------------------------------------------------------------------------------------
    def load(self) -> tuple[pd.DataFrame, dict]:
        """``(results frame, manifest)``, rows migrated to the current schema and the derived columns
        computed (:func:`~cpbench.results.derived.derive`).

        Reads ``results.parquet``, or ``results.jsonl`` (deduplicated, last wins) when there is no
        parquet or the jsonl holds rows the parquet lacks (an interrupted sweep; a CpbenchWarning says so).
        A row whose key column holds a value no sweep writes (a ``mode`` of "triple", a null ``bs``, ``rank`` 99 of a
        cp 2 cell), or whose value does not fit its column's type (a ``latency_us_median`` of "fast"), is left out,
        named by file, line (or parquet row), field and value in a CpbenchWarning (results/bad_rows.py).

        Raises:
            CpbenchInputError: missing directory, no results, a schema version this cpbench cannot read, or no
                valid row.
        """
        import pandas as pd

        from cpbench.results.derived import derive

        d = self.path
        if not d.is_dir():
            what = "is a file" if d.exists() else "does not exist"
            raise CpbenchInputError(f"run directory {str(d)!r} {what}: pass a directory made by cpbench sweep")
        manifest = self.read_manifest()
        numbered = self.numbered_rows()
        rows = [r for _, r in numbered]
        df, where = None, None
        if self.parquet.exists():
            try:
                with open(self.parquet, "rb") as f:  # any path the OS gave (see write_tables)
                    df = pd.read_parquet(f)
            except Exception as e:  # pyarrow raises its own types for a corrupt file
                raise CpbenchInputError(f"{str(self.parquet)!r} cannot be read ({type(e).__name__}): "
                                        "delete it to fall back to results.jsonl") from None
            if len(rows) > len(df):
                warnings.warn(f"{self.results} holds {len(rows)} rows, results.parquet {len(df)} (a sweep was "
                              "interrupted): reading results.jsonl", CpbenchWarning, stacklevel=2)
                df = None
            else:
                df = migrate_frame(df, manifest, str(self.parquet))
        source = self.parquet
        if df is None:
            if not rows:
                raise CpbenchInputError(f"{str(d)!r} holds no results (results.jsonl/parquet): run cpbench sweep first")
            df, source = pd.DataFrame(rows), self.results
            where = [f"line {line}" for line, _ in numbered]
        if df.empty:
            raise CpbenchInputError(f"{str(d)!r} holds no result rows")
        _check_versions(d, df)
        df = drop_bad_rows(df, source, where)
        if not (manifest.get("device") or (manifest.get("config") or {}).get("device")) and "mem_reason" in df \
                and (df["mem_reason"] == CPU_MEM_REASON).any():
            manifest = {**manifest, "device": "cpu"}  # no manifest: the rows say they ran on a CPU
        return derive(df, manifest), manifest


def as_utf8(text: str) -> str:
    """``text`` writable as UTF-8: a path the OS handed over as undecodable bytes (surrogate escapes, e.g.
    a UTF-8 name under LANG=C) read as UTF-8, bytes that are not UTF-8 as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def load_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """``RunDir(run_dir).load()``: ``(results frame, manifest)`` of a run directory."""
    return RunDir(run_dir).load()


def migrate_frame(df: pd.DataFrame, manifest: dict, source: str = "results.parquet") -> pd.DataFrame:
    """A results frame read from parquet (``source``: its path, for messages), migrated to the current schema
    (:func:`~cpbench.results.schema.migrate_row`). A frame with every column added within schema 2
    (:data:`~cpbench.results.schema.V2_DEFAULTS`) is migrated as a whole: its renamed columns
    (:data:`~cpbench.results.schema.V2_RENAMED`) read under their new names, the columns added within schema 3
    it lacks at their defaults (:data:`~cpbench.results.schema.V3_DEFAULTS`) and, when every row is schema 2,
    its backends renamed (:data:`~cpbench.results.schema.V3_BACKENDS`); any other frame row by row. Rows without
    a ``schema_version`` have the manifest's (1 when it has none).

    Raises:
        CpbenchInputError: the frame holds a renamed column under both its old and its new name.
    """
    import pandas as pd

    both = next(((old, new) for old, new in V2_RENAMED.items() if old in df.columns and new in df.columns), None)
    if both is not None:
        raise CpbenchInputError(f"{source!r} holds both column {both[0]!r} and its new name {both[1]!r}: keep one "
                                f"(drop {both[0]!r} if both hold the same values), or delete the file if "
                                "results.jsonl beside it holds the rows")

    raw = df.get("schema_version", pd.Series([manifest.get("schema_version", 1)] * len(df)))
    versions = pd.to_numeric(raw, errors="coerce")
    if {*V2_DEFAULTS, "prefix_lens"} <= set(df):
        if (versions == SCHEMA_VERSION).all():
            return _v3_defaults(df.rename(columns=V2_RENAMED))
        if (versions == 2).all():
            return _v3_defaults(_v2_frame_to_v3(df.rename(columns=V2_RENAMED)))
    return pd.DataFrame([migrate_row(r) for r in df.to_dict("records")])


def _v3_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each column added within schema 3 that it lacks (:data:`~cpbench.results.schema.V3_DEFAULTS`)
    at its default; ``df`` itself when it has them all."""
    missing = {k: v for k, v in V3_DEFAULTS.items() if k not in df}
    return df.assign(**missing) if missing else df


def _v2_frame_to_v3(df: pd.DataFrame) -> pd.DataFrame:
    """A schema 2 frame as schema 3: ``backend`` renamed (:data:`~cpbench.results.schema.V3_BACKENDS`), in a
    copy, and ``schema_version`` 3."""
    out = df.assign(schema_version=SCHEMA_VERSION)
    if "backend" in out:
        out["backend"] = out["backend"].map(renamed_backend)
    return out


def _check_versions(d: Path, df: pd.DataFrame) -> None:
    import pandas as pd

    raw = df["schema_version"].dropna() if "schema_version" in df else pd.Series(dtype=float)
    versions = {int(v) if math.isfinite(v) and v == int(v) else -1  # 1.7, inf, "x": not a schema we read
                for v in pd.to_numeric(raw, errors="coerce").fillna(-1).astype(float)}
    if versions and versions != {SCHEMA_VERSION}:
        raise CpbenchInputError(
            f"{str(d)!r} uses results schema {sorted(versions)}, this cpbench reads 1 to {SCHEMA_VERSION}: "
            "re-run the sweep or use the matching cpbench version")


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a ``results.jsonl`` as written (not migrated). A torn last line (killed mid-write) is left
    out, and other lines that are not JSON objects are skipped, each with a :class:`CpbenchWarning` naming the
    file and line.

    Raises:
        CpbenchInputError: the file is not UTF-8 text.
    """
    return [row for _, row in _numbered_jsonl(path)]


def _numbered_jsonl(path: Path) -> list[tuple[int, dict]]:
    """``(line number, row)`` of each row :func:`read_jsonl` returns (lines counted from 1)."""
    rows = []
    if not path.exists():
        return rows
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark (a file edited on Windows) is not a row
    except UnicodeDecodeError:
        raise CpbenchInputError(f"{str(path)!r} is not UTF-8 text: it is not a cpbench results file") from None
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    bad, torn = [], None
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError):  # nesting too deep, a huge integer
            row = None
        if isinstance(row, dict):
            rows.append((i + 1, row))
        elif line.strip() and i == last:
            torn = i + 1  # the last line: a write cut short
        elif line.strip():
            bad.append(i + 1)
    if bad and (str(path), tuple(bad)) not in _WARNED:  # once per file and set of lines in a process
        _WARNED.add((str(path), tuple(bad)))
        shown = ", ".join(map(str, bad[:10])) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else "")
        warnings.warn(f"{path}: line {shown} is not a result row and was skipped", CpbenchWarning, stacklevel=2)
    if torn is not None and (str(path), ("torn", torn)) not in _WARNED:
        _WARNED.add((str(path), ("torn", torn)))
        warnings.warn(f"{path}: line {torn} is cut off mid-row (a sweep stopped while writing it): that row is "
                      "left out, and a --resume measures it again", CpbenchWarning, stacklevel=2)
    return rows


def read_manifest(path: Path) -> dict:
    """``manifest.json`` as a dict ({} when absent). A ``config`` that is not an object becomes {}, and a
    ``resumed_by``/``sweep_wall_s``/``sweep_phase_s``/``timing_methods`` that is not a list becomes [] (hand-edited
    files); ``planned_cells`` keeps only the entries that are cell keys (results.planned: the others are named in
    a CpbenchWarning), and one that is not a list is dropped with a warning. A v1 config's
    ``seq_lens`` is read as ``extend_lens``, and a ``seq_list`` (config or plan) as ``extend_len_list``; a v1 or
    v2 manifest's backend names are read as schema 3 names them (:func:`_rename_backends`).

    Raises:
        CpbenchInputError: the file is not UTF-8 JSON holding an object.
    """
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte order mark is not an error
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError):  # too deep, huge integers
        manifest = None
    if not isinstance(manifest, dict):
        raise CpbenchInputError(f"{str(path)!r} is not a cpbench manifest (a JSON object): restore it, or delete "
                                "it (the results stay readable)")
    if not isinstance(manifest.get("config", {}), dict):
        manifest["config"] = {}
    cfg = manifest.get("config", {})
    if "seq_lens" in cfg and "extend_lens" not in cfg:
        cfg["extend_lens"] = cfg.pop("seq_lens")
    plans = manifest["planned"] if isinstance(manifest.get("planned"), list) else []
    for plan in [cfg, *(p for p in plans if isinstance(p, dict))]:
        if "seq_list" in plan and "extend_len_list" not in plan:  # --extend-len's list, once named after --seq
            plan["extend_len_list"] = plan.pop("seq_list")
    for key in ("resumed_by", "sweep_wall_s", "sweep_phase_s", "timing_methods"):
        if key in manifest and not isinstance(manifest[key], list):
            manifest[key] = []
    if manifest.get("schema_version", 1) in (1, 2):
        _rename_backends(manifest)
    if "planned_cells" in manifest:  # entries that are no cell key are left out, named in a warning
        cells = manifest["planned_cells"]
        if isinstance(cells, list):
            manifest["planned_cells"] = valid_planned_cells(cells, path)
        else:
            del manifest["planned_cells"]  # read as a manifest from before the list (the report re-plans)
            warnings.warn(f"{path}: planned_cells is {type(cells).__name__}, not a list of cell keys (a hand-edited "
                          "file?): ignored", CpbenchWarning, stacklevel=2)
    return manifest


def _rename_backends(manifest: dict) -> None:
    """Read a schema 1 or 2 manifest's backends under their schema 3 names, in place (FlashInfer's ``fa2`` /
    ``fa3`` -> ``flashinfer-fa2`` / ``flashinfer-fa3``, :data:`~cpbench.results.schema.V3_BACKENDS`): the config's
    ``backend`` list (``backends`` too) and the ``--backend`` of ``command`` and each ``resumed_by``, so that the
    report names them as the migrated rows do and its Reproduce line runs the kernel the run ran.
    ``schema_version`` stays as written (a ``--resume`` refuses the run by it)."""
    cfg = manifest["config"] if isinstance(manifest.get("config"), dict) else {}
    if isinstance(cfg.get("backend"), str):
        cfg["backend"] = renamed_backends(cfg["backend"])
    if isinstance(cfg.get("backends"), list):
        cfg["backends"] = [renamed_backend(b) for b in cfg["backends"]]
    if isinstance(manifest.get("command"), str):
        manifest["command"] = renamed_command(manifest["command"])
    if isinstance(manifest.get("resumed_by"), list):
        manifest["resumed_by"] = [renamed_command(c) if isinstance(c, str) else c for c in manifest["resumed_by"]]


def _jsonable(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` to ``path`` atomically (a kill leaves the old file or the new one, never half). Raises
    OSError naming ``path`` (a full disk); the temporary file beside it is removed."""
    tmp = path.with_suffix(".tmp")
    try:
        with naming(path):
            tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
            os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


@contextmanager
def naming(path: Path):
    """Re-raise an OSError that names no file (a write on a full disk: ENOSPC) as the same error naming
    ``path``, so its one-line message says which file could not be written."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from None
