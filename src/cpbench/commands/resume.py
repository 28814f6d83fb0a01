"""Whether a sweep may ``--resume`` a run directory: the same options (the grid among them), the same cells,
host and thread count as the run was measured with; each refusal one line naming what differs, as the user
types it (commands/resume_options.py). A torchrun launcher checks the same before its ranks start."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

from cpbench.errors import CpbenchInputError
from cpbench.measure.affinity import parse_cpu_list
from cpbench.ranks.group import RankGroup
from cpbench.results.schema import FIXED_ON_RESUME, GRID_OPTIONS
from cpbench.results.store import RUNS_ROOT, RunDir
from cpbench.commands.config import SweepConfig
from cpbench.commands.manifest import GROWING, config_dict, planned_cells
from cpbench.commands.resume_options import FLAGS, difference
from cpbench.commands.runner import omp_threads


def check_resume_config(run: RunDir, cfg: SweepConfig, group: RankGroup) -> None:
    """Raise CpbenchInputError when --resume would mix rows measured under other options
    (:data:`~cpbench.results.schema.FIXED_ON_RESUME`, the grid among them) or add other cells, naming what
    differs (:func:`resume_mismatch`)."""
    why = resume_mismatch(run, cfg, group)
    if why:
        raise CpbenchInputError(f"--resume: {run} {why}: resume with the same options or pick another --out")


def resume_mismatch(run: RunDir, cfg: SweepConfig, group: RankGroup) -> str | None:
    """What keeps ``cfg`` from resuming ``run``, e.g. ``"was measured with --bs 2, not --bs 1,2"``, or None.
    Raises CpbenchInputError for a manifest or results file that cannot be read."""
    old = run.read_manifest().get("config", {})
    now = config_dict(cfg, group)
    # the model last: at another --tp its per-GPU heads differ too, and the message should name tp_size
    new = {"launch": group.launch, "world_size": group.world_size,
           **{k: now[k] for k in FIXED_ON_RESUME if k != "model" and k in now}, "model": now["model"]}
    if isinstance(old.get("model"), dict):  # fields added to ModelSpec later (window_rule) are not in old runs
        new["model"] = {k: v for k, v in new["model"].items() if k in old["model"]}
    # an option added after the run was made is absent from its manifest: the run was made at its default
    defaults = {f.name: f.default for f in dataclasses.fields(SweepConfig) if f.default is not dataclasses.MISSING}
    defaults.update(prefix=0, batches=None, prefix_hit=None)  # cells_from's options, when not given
    if old:  # (a lost manifest says nothing: the rows are checked below)
        old = {**{k: v for k, v in defaults.items() if k in new and k not in ("model", "backend", *GRID_OPTIONS)},
               **old}  # a grid list is compared only where the manifest records it
    if any(c.get(k) is not None for c in (old, now) for k in ("extend_lens", "batches")):
        new.pop("bs_list", None)  # the batches were given whole: the --bs/--extend-len lists beside them are
        new.pop("extend_len_list", None)  # defaults (or, for --lengths, compared as the batches)
    for key in new:
        if key in old and _as_compared(key, old[key]) != _as_compared(key, new[key]):
            return difference(key, old[key], new[key])
    planned = _planned_mismatch(run, cfg)
    if planned:
        return planned
    # The rows themselves, in case the manifest was lost or edited: model (its name carries overrides),
    # backend and dtype must match.
    rows = run.rows()
    for key, values in (("model", {cfg.model.name}), ("backend", set(cfg.backends)), ("dtype", {cfg.dtype})):
        other = sorted({str(r.get(key)) for r in rows} - values)
        if other:
            return f"holds rows measured with {FLAGS.get(key, key)} {other[0]!r}, not {', '.join(sorted(values))!r}"
    return None


def _as_compared(key: str, value):
    """A config value as a resume compares it: as JSON reads it back, and a list a manifest keeps as a sorted
    union (commands/manifest.GROWING: --cp, --bs, --extend-len, --timing, --mode) as a set."""
    value = json.loads(json.dumps(value))
    if key in GROWING and isinstance(value, list):
        return {json.dumps(v) for v in value}
    return value


def _planned_mismatch(run: RunDir, cfg: SweepConfig) -> str | None:
    """How the cells this sweep plans differ from the manifest's ``planned_cells``, or None (a config built in
    Python without ``cells_from`` records no --bs/--extend-len list to compare)."""
    planned = run.read_manifest().get("planned_cells")
    if not isinstance(planned, list) or not planned:
        return None
    label = lambda c: f"cp{c['cp_size']} bs{c['bs']} extend{c['max_extend_len']}" + (  # noqa: E731
        f" b{c['batch']}" if c["batch"] else "")
    old = dict.fromkeys(label(c) for c in planned)
    new = dict.fromkeys(label(c) for c in planned_cells(cfg.cells(), cfg.timings))
    if old.keys() == new.keys():
        return None
    extra = next((c for c in new if c not in old), None)
    where = (f"{extra} is not in the run's plan" if extra is not None else
             f"the run's {next(c for c in old if c not in new)} is not in this sweep's")
    return f"planned {len(old)} cell{'' if len(old) == 1 else 's'}, this sweep plans {len(new)} ({where})"


def check_resume_host(run: RunDir, cpu_threads: int | None, cpu_affinity: dict | None) -> None:
    """Raise CpbenchInputError when a resumed CPU sweep would run on another number of intra-op threads,
    or a sweep under another ``--cpu-affinity``, than the manifest records (its timing method would no
    longer describe every row). Manifests without the record are not checked."""
    old = run.read_manifest()
    was_threads = old.get("cpu_threads")
    if (cpu_threads is not None and isinstance(was_threads, int) and not isinstance(was_threads, bool)
            and was_threads > 0 and was_threads != cpu_threads):
        raise CpbenchInputError(f"--resume: {run} was measured on {was_threads} CPU thread(s), this sweep would "
                                f"use {cpu_threads}: set OMP_NUM_THREADS={was_threads} or pick another --out")
    was = old["cpu_affinity"].get("requested") if isinstance(old.get("cpu_affinity"), dict) else None
    now = (cpu_affinity or {}).get("requested")
    if "timing_method" in old and _cores(was) != _cores(now):
        raise CpbenchInputError(f"--resume: {run} was measured with --cpu-affinity {was or '(none)'}, not "
                                f"{now or '(none)'}: resume with the same option or pick another --out")


def precheck_resume(cfg: SweepConfig, out, world_size: int, cpu_affinity: str | None = None) -> None:
    """Before a torchrun launch starts its ranks: the checks a ``--resume`` into ``out`` would fail on a
    rank (other options, world size or intra-op thread count than the run was measured with), so they
    end in one line without starting any process; also a manifest that is not a file. Reads the directory
    without taking its lock (rank 0 takes it and checks again). A directory without a manifest is left to
    the ranks.

    Raises:
        CpbenchInputError: as :func:`check_resume_config` and :func:`check_resume_host`.
    """
    run = RunDir(out)
    if out is None or not run.path.is_dir():  # (an --out that is a file: refused by the launcher first)
        return
    if run.manifest_path.exists() and not run.manifest_path.is_file():
        raise CpbenchInputError(f"--resume: {str(run.manifest_path)!r} is not a file: move it away (the rows in "
                                "results.jsonl are read without it) or pick another --out")
    if not run.manifest_path.is_file():
        return
    check_resume_config(run, cfg, SimpleNamespace(launch="torchrun", world_size=world_size))
    threads = (omp_threads() or 1) if cfg.device.type == "cpu" else None  # the launcher's OMP_NUM_THREADS default
    check_resume_host(run, threads, None if cpu_affinity is None else {"requested": cpu_affinity})


def _cores(cpu_list) -> tuple | None:
    """The cores of a recorded ``--cpu-affinity`` list (None: none given, or unreadable as a list)."""
    if not isinstance(cpu_list, str) or not cpu_list.strip():
        return None
    try:
        return tuple(parse_cpu_list(cpu_list))
    except CpbenchInputError:
        return (cpu_list,)  # a hand-edited value: compared as written


def find_unfinished(cfg: SweepConfig, group: RankGroup, root: Path = RUNS_ROOT) -> RunDir:
    """The run a ``--resume`` without ``--out`` continues: the newest run directory in ``root`` (by its last
    write) that ``cfg`` may resume (:func:`resume_mismatch`), that is unfinished (:meth:`RunDir.finished`) and
    that no other sweep is writing.

    Raises:
        CpbenchInputError: ``root`` holds no run, or none fits; the message names the newest run and why it
            does not.
    """
    runs = RunDir(root).runs_inside()
    if not runs:
        raise CpbenchInputError(f"--resume without --out: {root} holds no run to resume: pass the --out of the "
                                "sweep to resume, or drop --resume to start a new run")
    newest = None
    for run in reversed(runs):
        try:
            why = resume_mismatch(run, cfg, group)
        except CpbenchInputError as e:  # a manifest or results file that cannot be read
            why = f"cannot be read ({e})"
        holder = None if why else run.writer()
        why = why or ("is finished" if run.finished() else f"is being written by {holder}" if holder else None)
        if why is None:
            return run
        newest = newest or f"the newest, {run}, {why}"
    n = len(runs)
    raise CpbenchInputError(f"--resume without --out: no unfinished run of this command in {root} ({n} run"
                            f"{'' if n == 1 else 's'} there; {newest}): pass --out RUN to resume one, or drop "
                            "--resume to start a new run")

