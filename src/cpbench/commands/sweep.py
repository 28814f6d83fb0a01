"""A sweep without its user interface: plan cells, open (or resume) the run directory, write the
manifest, run every cell through a :class:`Runner`, finalize the tables, decide the exit code.

The CLI (``cli.sweep``) adds the progress bar, the summary table and the report. Under torchrun every
process runs a :class:`Sweep`; only the writer (rank 0) touches the run directory, and it shares the
plan (cells, rows already on disk) and any input error with the other processes before anything runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from cpbench.domain.modes import Status, Timing
from cpbench.kernels.backends import get_backend, resolve_auto
from cpbench.measure.env import environment
from cpbench.domain.geometry import eligibility
from cpbench.measure.peak import gemm_peak
from cpbench.ranks.group import LocalGroup, RankGroup
from cpbench.commands.manifest import SweepManifest, config_dict, planned_cells, record_wall_time
from cpbench.commands.resume import check_resume_config, check_resume_host, find_unfinished
from cpbench.commands.runner import (DTYPES, Runner, SweepConfig, cpu_longest_extend, cpu_sweep_threads,
                                cpu_tflop_limit, cpu_too_much, over_token_budget)
from cpbench.domain.cells import CellSpec
from cpbench.results.schema import row_key
from cpbench.results.store import RunDir
from cpbench.errors import CpbenchInputError, shorten


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
    run on this device, model and dtype (what ``cpbench doctor`` reports), no batch is CP-eligible, every
    batch is over the token cap, or on a CPU every cell left is over the reference's TFLOP limit (the message
    names the longest --extend-len that fits); or when the CPU TFLOP limit is not a number."""
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
    if cfg.device.type == "cpu":
        left = [c for o, c in zip(over, cells) if not o and eligibility(c.extend_lens, c.cp_size, rule)[0]]
        if all(cpu_too_much(cfg.model, c) for c in left):
            c = min(left, key=lambda x: (sum(x.extend_lens), x.cp_size))  # the one nearest the limit
            fits = cpu_longest_extend(cfg.model, c.cp_size, c.bs, c.prefix_len)
            what = (f"shorter requests: at bs {c.bs} and cp_size {c.cp_size}, --extend-len {fits} or less fits"
                    if fits else f"fewer requests than bs {c.bs} (--bs)")
            raise CpbenchInputError(f"no cell can run on a CPU: {cpu_too_much(cfg.model, c)}: use a GPU, or {what}")


ERRORS_DIR = "errors"  # RUN/errors/<cell>-r<rank>-<mode>.txt: the traceback of each error row


class Sweep:
    """One sweep: ``Sweep.open(...)`` then :meth:`run`, :meth:`finish`, :meth:`exit_code`."""

    def __init__(self, cfg: SweepConfig, cells: list[CellSpec], run: RunDir | None, runner: Runner,
                 resumed_rows: int, started: float, found: bool = False) -> None:
        self.cfg, self.cells, self.run_dir, self.runner = cfg, cells, run, runner
        self.resumed_rows = resumed_rows
        self.found = found  # a --resume without --out: run_dir is the newest unfinished run of this command
        self._t0 = started

    @classmethod
    def open(cls, cfg: SweepConfig, out, resume: bool, group: RankGroup | None = None,
             env_extra: dict | None = None, timings: tuple = ()) -> "Sweep":
        """Plan the cells, open the run directory (writer only) and write its manifest. ``out`` None: a new
        ``runs/<timestamp>``, or with ``resume`` the newest unfinished run of this sweep in ``runs/``
        (:func:`~cpbench.commands.resume.find_unfinished`). ``timings``: the studies' timings
        (:class:`~cpbench.measure.method.TimingFactory`, ``studies.timings()``) beside eager and graph.

        Raises:
            CpbenchInputError: no cell can run, a bad --out, a resume with other options (or, without
                ``out``, no run to resume), or a run directory another sweep holds (raised on every process
                of a launch).
        """
        t0 = time.monotonic()
        group = group or LocalGroup()
        cells = cfg.cells()
        run, done, error, found = None, set(), None, False
        if group.writes_rows:
            try:
                check_cells(cfg, cells)
                if resume and out is None:
                    out = find_unfinished(cfg, group).path
                    found = True
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
        try:
            prior = {row_key(r): r for r in run.latest_rows()} if run is not None and cfg.passes > 1 else {}
            runner = Runner(cfg, run.append_rows if run is not None else _no_writer, set(map(tuple, done)), group=group,
                            prior=prior, error_dir=Path(path) / ERRORS_DIR, timings=timings)
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
        except BaseException:  # a failure before the first cell (a full disk): the directory is free again
            if run is not None:
                run.unlock()
            raise
        return cls(cfg, cells, run, runner, len(done), t0, found)

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
        errors = df[df["status"] == Status.ERROR] if not df.empty else df
        if df.empty or not (df["status"].isin([Status.OK, Status.MISMATCH])).any():
            reasons = sorted(set(df.get("reason", []))) if not df.empty else []
            if len(errors):  # every cell raised: a crash (1, or 0 with --keep-going), not bad input
                return (0, "") if keep_going else (1, f"no cell ran: every one ended in an error, first: "
                                                      f"{str(errors['reason'].iloc[0])[:160]} (tracebacks in "
                                                      f"{self.run_dir.path / ERRORS_DIR if self.run_dir else 'RUN/errors'};"
                                                      " --keep-going to exit 0)")
            return 2, f"no cell could run: {shorten('; '.join(map(str, reasons)), 300)}"
        problems = []
        mismatches = int((df["status"] == Status.MISMATCH).sum())
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


def timing_method(cfg: SweepConfig, cpu_threads: int | None) -> str:
    """One sentence of what a sample is, for the manifest and the report."""
    clock = "CUDA events" if cfg.device.type == "cuda" else "time.perf_counter"
    graph = " (graph = CUDA graph replay)" if Timing.GRAPH in cfg.timings else ""
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
