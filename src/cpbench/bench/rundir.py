"""Run-directory lifecycle: create or resume, manifest, and the final tables (no torch here)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pandas as pd

from cpbench.bench.results import SCHEMA_VERSION, latest_rows, read_jsonl, read_manifest, row_key, write_tables
from cpbench.errors import CpbenchInputError

RESULTS = "results.jsonl"
GROWING = ("cp_sizes", "bs_list", "seq_list", "timings", "modes")  # config lists a resume may extend


def open_run_dir(out: str | Path | None, resume: bool) -> Path:
    """Create (or, with ``resume``, reopen) a run directory; default ``runs/<YYYYmmdd-HHMMSS>``.

    Raises:
        CpbenchInputError: ``out`` is a file, is not writable, already holds results without
            ``resume``, or ``resume`` names a directory without results.
    """
    d = Path(out) if out else Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
    if d.exists() and not d.is_dir():
        raise CpbenchInputError(f"--out {str(d)!r} is a file: pass a directory path")
    has_rows = (d / RESULTS).exists()
    if resume and not has_rows and (d / "manifest.json").exists():
        has_rows = True  # interrupted before its first row: resume it from the start
    elif resume and not has_rows:
        raise CpbenchInputError(f"--resume: {str(d)!r} holds no {RESULTS}: pass the --out of the sweep to resume")
    if has_rows and not resume:
        raise CpbenchInputError(f"{str(d)!r} already holds results: add --resume to continue it, or pick another --out")
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".cpbench-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise CpbenchInputError(f"cannot write to {str(d)!r} ({e.strerror or e}): choose another --out") from None
    return d


def done_keys(run_dir: Path) -> set:
    """Keys of rows already measured in ``run_dir`` (for --resume)."""
    return {row_key(r) for r in read_jsonl(run_dir / RESULTS)}


def write_manifest(run_dir: Path, env: dict, config: dict) -> None:
    """Write ``manifest.json``: schema version, environment (versions, GPU/CPU, command) and config.
    On resume the first manifest's ``created`` and command are kept and the new command is appended
    to ``resumed_by``."""
    path = run_dir / "manifest.json"
    manifest = {"schema_version": SCHEMA_VERSION, **env, "config": config}
    if path.exists():
        old = read_manifest(path)
        merged = {**old.get("config", {}), **config}
        for key in GROWING:  # a resume may add cells: the config plans old and new ones
            a, b = old.get("config", {}).get(key), config.get(key)
            if isinstance(a, list) and isinstance(b, list):
                merged[key] = _union(a, b)
        manifest = {**old, "config": merged, "resumed_by": [*old.get("resumed_by", []), env.get("command")]}
    _write_json(path, manifest)


def _write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` to ``path`` atomically (a kill leaves the old file or the new one, never half)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _union(a: list, b: list) -> list:
    """Sorted union of two config lists (numbers numerically; mixed or odd values by their text)."""
    try:
        return sorted(set(a) | set(b))
    except TypeError:  # unhashable or mixed types in a hand-edited manifest
        return sorted({json.dumps(x): x for x in [*a, *b]}.values(), key=json.dumps)


def record_wall_time(run_dir: Path, seconds: float, new_entry: bool = False) -> None:
    """Record this invocation's wall time so far (s) in the manifest's ``sweep_wall_s`` list: one entry
    per invocation (a resumed sweep shows each part). ``new_entry`` starts this invocation's entry; later
    calls (after each cell, and at the end) overwrite it, so a killed sweep keeps the time it ran."""
    path = run_dir / "manifest.json"
    manifest = read_manifest(path)
    walls = list(manifest.get("sweep_wall_s", []))
    if new_entry or not walls:
        walls.append(0.0)
    walls[-1] = round(seconds, 1)
    manifest["sweep_wall_s"] = walls
    _write_json(path, manifest)


def finalize(run_dir: Path) -> pd.DataFrame:
    """Dedupe ``results.jsonl`` by row key (last wins) and write ``results.parquet`` / ``.csv``."""
    return write_tables(run_dir, latest_rows(run_dir / RESULTS))
