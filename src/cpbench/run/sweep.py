"""A sweep without its user interface: plan cells, open (or resume) the run directory, write the
manifest, run every cell through a :class:`Runner`, finalize the tables, decide the exit code.

The CLI (``cli.sweep``) adds the progress bar, the summary table and the report. Under torchrun every
process runs a :class:`Sweep`; only the writer (rank 0) touches the run directory, and it shares the
plan (cells, rows already on disk) and any input error with the other processes before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

from cpbench.measure.affinity import parse_cpu_list
from cpbench.kernels.backends import get_backend, resolve_auto
from cpbench.measure.env import environment
from cpbench.domain.geometry import eligibility
from cpbench.measure.peak import gemm_peak
from cpbench.ranks.group import LocalGroup, RankGroup
from cpbench.run.resume_options import FLAGS, difference
from cpbench.run.manifest import GROWING, SweepManifest, planned_cells, record_wall_time
from cpbench.run.runner import (DTYPES, Runner, SweepConfig, cpu_sweep_threads, omp_threads, cpu_tflop_limit,
                                over_token_budget)
from cpbench.domain.cells import CellSpec
from cpbench.results.schema import FIXED_ON_RESUME, GRID_OPTIONS, row_key
from cpbench.results.store import RunDir
from cpbench.errors import CpbenchInputError


@dataclass(frozen=True)
class SweepOutput:
    """Where a sweep writes and what it does at the end: ``out`` (run directory; None: runs/<timestamp>),
    ``resume`` (continue it), ``report`` (charts and report.md), ``allow_mismatch`` (exit 0 despite failed
    checks), ``keep_going`` (exit 0 despite error rows)."""

    out: str | None = None
    resume: bool = False
    report: bool = True
    allow_mismatch: bool = False
    keep_going: bool = False


def make_config(backend: str, **fields) -> SweepConfig:
    """A SweepConfig with ``auto`` resolved for ``fields["device"]``; ``backend`` is one name or a
    comma-separated list (measured on the same cells, in that order; duplicates dropped). Raises
    CpbenchInputError for an unknown backend."""
    names = [resolve_auto(fields["device"]) if b == "auto" else b for b in backend.split(",") if b.strip()]
    return SweepConfig(backends=tuple(dict.fromkeys(names)), **fields)


def check_cells(cfg: SweepConfig, cells: list[CellSpec]) -> None:
    """Raise CpbenchInputError, before a run directory is made, when no cell could run: the backend cannot
    run on this device, model and dtype (what ``cpbench doctor`` reports), or no batch is CP-eligible; or
    when the CPU TFLOP limit is not a number."""
    for name in cfg.backends:
        why = get_backend(name).supports(cfg.device, cfg.model, DTYPES[cfg.dtype])
        if why:
            raise CpbenchInputError(f"backend {name} cannot run here: {why} (`cpbench doctor` lists the "
                                    "backends this machine can run)")
    if cfg.device.type == "cpu":
        cpu_tflop_limit()
    rule = cfg.cp_rule
    if not any(eligibility(c.extend_lens, c.cp_size, rule)[0] for c in cells):
        c = cells[0]
        need = max(rule.need(x.cp_size) for x in cells)
        raise CpbenchInputError(f"no cell can run: {eligibility(c.extend_lens, c.cp_size, rule)[1]} "
                                f"(every batch must pass --cp-min-extend {rule.min_extend}): use --extend-len "
                                f"{need} or more" + (f" and at least {rule.min_tokens} tokens a batch"
                                                     if rule.min_tokens else ""))
    over = [over_token_budget(c, cfg.max_prefill_tokens) for c in cells]
    if all(o or not eligibility(c.extend_lens, c.cp_size, rule)[0] for o, c in zip(over, cells)):
        first = next(o for o in over if o)[1]
        raise CpbenchInputError(f"no cell can run: {first}" if all(over) else
                                f"no cell can run: each is not CP-eligible or over the token cap ({first})")


ERRORS_DIR = "errors"  # RUN/errors/<cell>-r<rank>-<mode>.txt: the traceback of each error row


class Sweep:
    """One sweep: ``Sweep.open(...)`` then :meth:`run`, :meth:`finish`, :meth:`exit_code`."""

    def __init__(self, cfg: SweepConfig, cells: list[CellSpec], run: RunDir | None, runner: Runner,
                 resumed_rows: int, started: float) -> None:
        self.cfg, self.cells, self.run_dir, self.runner = cfg, cells, run, runner
        self.resumed_rows = resumed_rows
        self._t0 = started

    @classmethod
    def open(cls, cfg: SweepConfig, out, resume: bool, group: RankGroup | None = None,
             env_extra: dict | None = None) -> "Sweep":
        """Plan the cells, open the run directory (writer only) and write its manifest.

        Raises:
            CpbenchInputError: no cell can run, a bad --out, a resume with other options, or a run
                directory another sweep holds (raised on every process of a launch).
        """
        t0 = time.monotonic()
        group = group or LocalGroup()
        cells = cfg.cells()
        run, done, error = None, set(), None
        if group.writes_rows:
            try:
                check_cells(cfg, cells)
                run = RunDir.create(out, resume)
                if resume:
                    check_resume_config(run, cfg, group)
                    threads = cpu_sweep_threads() if cfg.device.type == "cpu" else None
                    check_resume_host(run, threads, (env_extra or {}).get("cpu_affinity"))
                done = run.done_keys()
            except CpbenchInputError as e:
                error = str(e)
                if run is not None:
                    run.unlock()
        error, done, path = group.share((error, sorted(done), str(run.path) if run is not None else None))
        if error:
            raise CpbenchInputError(error)
        prior = {row_key(r): r for r in run.latest_rows()} if run is not None and cfg.passes > 1 else {}
        runner = Runner(cfg, run.append_rows if run is not None else _no_writer, set(map(tuple, done)), group=group,
                        prior=prior, error_dir=Path(path) / ERRORS_DIR)
        if run is not None:
            peak = gemm_peak(cfg.device, DTYPES[cfg.dtype])
            env = environment(cfg.device)
            env["gemm_peak"] = peak
            env.update(getattr(group, "manifest_info", dict)())
            env.update(env_extra or {})
            env["timing_method"] = timing_method(cfg, runner.cpu_threads)
            if runner.cpu_threads is not None:
                env["cpu_threads"] = runner.cpu_threads
            SweepManifest(env, config_dict(cfg, group), planned_cells(cells, cfg.timings)).write(run)
            runner.times.add("startup", time.monotonic() - t0)
            record_wall_time(run, time.monotonic() - t0, new_entry=True, phases=runner.times.breakdown(0.0))
        return cls(cfg, cells, run, runner, len(done), t0)

    def total_ranks(self) -> int:
        """Rank measurements this process makes in the plan, every pass (for a progress bar)."""
        g = self.runner.group
        per_pass = len(self.cfg.backends) * sum(len(g.local_ranks(c.cp_size, self.runner.ranks(c))) for c in self.cells)
        return per_pass * self.cfg.passes

    def run(self, on_cell: Callable[[CellSpec, int], None] = lambda c, p: None,
            on_rank: Callable[[], None] = lambda: None) -> None:
        """Measure every cell in each of ``cfg.passes`` passes (measure/passes.py: pass 1 over every cell, then
        pass 2, ...; ``on_cell(cell, pass)`` before each, ``on_rank`` after each rank)."""
        for p in range(1, self.cfg.passes + 1):
            for c in self.cells:
                on_cell(c, p)
                self.runner.run_cell(c, on_rank=on_rank, pass_no=p)
                self._record_wall_time()

    def finish(self):
        """Write the final tables (writer); return the results frame (None on other processes)."""
        if self.run_dir is None:
            return None
        df = self.run_dir.finalize()
        self._record_wall_time()
        return df

    def _record_wall_time(self) -> None:
        if self.run_dir is not None:
            wall = time.monotonic() - self._t0
            record_wall_time(self.run_dir, wall, phases=self.runner.times.breakdown(wall))

    def close(self) -> None:
        if self.run_dir is not None:
            self.run_dir.unlock()

    def exit_code(self, df, allow_mismatch: bool, keep_going: bool = False) -> tuple[int, str]:
        """``(code, message)``: 2 when no cell could run; 1 when any row of the run directory failed the
        correctness check (unless ``allow_mismatch``) or ended in an ``error`` (an exception in cpbench or a
        backend, its traceback in ``RUN/errors/``; unless ``keep_going``); else 0. ``ineligible``,
        ``unsupported``, ``skipped`` and ``oom`` rows are expected and exit 0. ``df`` is the whole run
        directory, so a ``--resume`` that completes a run still fails on the rows an earlier invocation wrote."""
        if df is None:
            return 0, ""
        errors = df[df["status"] == "error"] if not df.empty else df
        if df.empty or not (df["status"].isin(["ok", "mismatch"])).any():
            reasons = sorted(set(df.get("reason", []))) if not df.empty else []
            if len(errors):  # every cell raised: a crash (1, or 0 with --keep-going), not bad input
                return (0, "") if keep_going else (1, f"no cell ran: every one ended in an error, first: "
                                                      f"{str(errors['reason'].iloc[0])[:160]} (tracebacks in "
                                                      f"{self.run_dir.path / ERRORS_DIR if self.run_dir else 'RUN/errors'};"
                                                      " --keep-going to exit 0)")
            return 2, f"no cell could run: {'; '.join(map(str, reasons))[:300]}"
        problems = []
        mismatches = int((df["status"] == "mismatch").sum())
        if mismatches and not allow_mismatch:
            earlier = mismatches - self.runner.mismatches
            note = f", {earlier} of them written before this resume" if earlier > 0 else ""
            problems.append(f"{mismatches} row(s) failed the correctness check{note} (--allow-mismatch to accept)")
        if len(errors) and not keep_going:
            where = f" in {self.run_dir.path / ERRORS_DIR}" if self.run_dir is not None else ""
            problems.append(f"{len(errors)} row(s) ended in an error, first: {str(errors['reason'].iloc[0])[:160]} "
                            f"(tracebacks{where}; --keep-going to exit 0)")
        return (1, "; ".join(problems)) if problems else (0, "")


def _no_writer(rows: list[dict]) -> None:
    raise RuntimeError("only the writer (rank 0) emits rows")


def config_dict(cfg: SweepConfig, group: RankGroup) -> dict:
    """The manifest's ``config``: every SweepConfig field (model as a dict) but the planned batches, the
    options the batches came from (``cells_from``: bs_list, extend_len_list, extend_lens, prefix, lengths, trace,
    prefix_hit, batches), plus launch and world_size. Lists as JSON lists."""
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("batches", "cells_from")}
    fields["backend"] = cfg.backend  # comma-joined, as manifests always held it (not the backends tuple)
    del fields["backends"]
    config = {k: (str(v) if k == "device" else dataclasses.asdict(v) if k == "model" else v) for k, v in fields.items()}
    config.update(dict(cfg.cells_from))
    config["launch"], config["world_size"] = group.launch, group.world_size
    return json.loads(json.dumps(config))


def check_resume_config(run: RunDir, cfg: SweepConfig, group: RankGroup) -> None:
    """Raise CpbenchInputError when --resume would mix rows measured under other options
    (:data:`~cpbench.results.schema.FIXED_ON_RESUME`)."""
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
            raise CpbenchInputError(f"--resume: {run} {difference(key, old[key], new[key])}: resume with the "
                                    "same options or pick another --out")
    _check_planned_cells(run, cfg)
    # The rows themselves, in case the manifest was lost or edited: model (its name carries overrides),
    # backend and dtype must match.
    rows = run.rows()
    for key, values in (("model", {cfg.model.name}), ("backend", set(cfg.backends)), ("dtype", {cfg.dtype})):
        other = sorted({str(r.get(key)) for r in rows} - values)
        if other:
            raise CpbenchInputError(f"--resume: {run} holds rows measured with {FLAGS.get(key, key)} {other[0]!r}, not "
                                    f"{', '.join(sorted(values))!r}: resume with the same options or pick another --out")


def _as_compared(key: str, value):
    """A config value as a resume compares it: as JSON reads it back, and a list a manifest keeps as a sorted
    union (run/manifest.GROWING: --cp, --bs, --extend-len, --timing, --mode) as a set."""
    value = json.loads(json.dumps(value))
    if key in GROWING and isinstance(value, list):
        return {json.dumps(v) for v in value}
    return value


def _check_planned_cells(run: RunDir, cfg: SweepConfig) -> None:
    """Raise CpbenchInputError when this sweep plans other cells than the manifest's ``planned_cells`` (a config
    built in Python without ``cells_from`` records no --bs/--extend-len list to compare)."""
    planned = run.read_manifest().get("planned_cells")
    if not isinstance(planned, list) or not planned:
        return
    label = lambda c: f"cp{c['cp_size']} bs{c['bs']} extend{c['max_extend_len']}" + (  # noqa: E731
        f" b{c['batch']}" if c["batch"] else "")
    old = dict.fromkeys(label(c) for c in planned)
    new = dict.fromkeys(label(c) for c in planned_cells(cfg.cells(), cfg.timings))
    if old.keys() == new.keys():
        return
    extra = next((c for c in new if c not in old), None)
    where = (f"{extra} is not in the run's plan" if extra is not None else
             f"the run's {next(c for c in old if c not in new)} is not in this sweep's")
    raise CpbenchInputError(f"--resume: {run} planned {len(old)} cell{'' if len(old) == 1 else 's'}, this sweep plans "
                            f"{len(new)} ({where}): resume with the same cells or pick another --out")


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


def timing_method(cfg: SweepConfig, cpu_threads: int | None) -> str:
    """One sentence of what a sample is, for the manifest and the report."""
    clock = "CUDA events" if cfg.device.type == "cuda" else "time.perf_counter"
    graph = " (graph = CUDA graph replay)" if "graph" in cfg.timings else ""
    layers, warm = cfg.model.num_layers, cfg.warmup
    sync = "device synchronised before each sample" if cfg.device.type == "cuda" else "one forward at a time"
    return (f"{clock}, one whole forward ({layers} layer{'' if layers == 1 else 's'}) per sample, {sync}; "
            f"up to {warm} warm-up forward{'' if warm == 1 else 's'} (one when more would overrun the time budget); "
            f"up to ~{cfg.budget_ms:g} ms of samples per variant"
            f"{f' split over {cfg.passes} passes over the sweep (later passes: one warm-up)' if cfg.passes > 1 else ''}"
            f"{f', fewer once the median is known within {100 * cfg.rel_ci:g} % (95 % CI)' if cfg.rel_ci else ''} "
            f"(>= {cfg.timing_policy().min_reps(cfg.device.type == 'cuda')}"
            f"{'' if cpu_threads is None else f', {cpu_threads} CPU thread' + ('' if cpu_threads == 1 else 's')}"
            f"); two-call and fused interleaved "
            f"ABBA; timings: {', '.join(cfg.timings)}{graph}; setup (metadata, page tables"
            f"{', plan' if cfg.device.type == 'cuda' else ''}) timed separately on the host")
