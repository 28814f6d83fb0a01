"""The cell loop: cells of a sweep -> the ranks this process owns -> rows to the writer.

Per cell (a batch at one cp_size) the inputs are built once per process; each rank this process owns
(:meth:`RankGroup.local_ranks`) is measured by :func:`cpbench.measure.rank.measure_rank`; rows go to
the writer (rank 0) through :meth:`RankGroup.collect`. A cell that cannot run becomes rows with a
status and a reason on every rank, and the sweep goes on.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from pathlib import Path
from typing import Callable

import torch

from cpbench.kernels.backends.registry import get_backend, get_spec
from cpbench.domain.cells import CellSpec
from cpbench.measure.env import sm_clock_mhz
from cpbench.domain.flops import forward_flops
from cpbench.domain.geometry import all_ranks, eligibility
from cpbench.domain.lengths import MAX_TOKENS
from cpbench.kernels.kv import duplicate_block_tables, table_bytes
from cpbench.measure.failures import Tracebacks
from cpbench.measure.kernel_counts import count_kernels
from cpbench.measure.method import TimingFactory, TimingMethod, Unavailable
from cpbench.measure.passes import merge_pass
from cpbench.measure.rank import CORE_TIMINGS, DTYPES, RankJob, is_oom, measure_rank
from cpbench.domain.models import ModelSpec
from cpbench.domain.modes import Status
from cpbench.ranks.group import OK_PAIR, LocalGroup, RankGroup, StatusPair
from cpbench.results.rows import make_row
from cpbench.results.schema import row_key
from cpbench.measure.timing import Clock, time_op_us
from cpbench.measure.walltime import PhaseTimes
from cpbench.kernels.workload import CellInputs
from cpbench.errors import CpbenchInputError, CpbenchWarning, one_line
from cpbench.commands.config import SweepConfig
from cpbench.commands.prepare import CellPrep

__all__ = ["DTYPES", "Runner", "SweepConfig", "count_kernels", "cpu_longest_extend", "cpu_refusal", "cpu_too_much",
           "cpu_tflop_limit",
           "is_oom"]


def cpu_tflop_limit() -> float:
    """TFLOP per forward above which the CPU reference refuses a cell: ``$CPBENCH_CPU_TFLOP_LIMIT``, default 2
    (about a minute per forward on 2 cores). Raises CpbenchInputError for a value that is not a number > 0."""
    text = os.environ.get("CPBENCH_CPU_TFLOP_LIMIT", "2")
    try:
        limit = float(text)
    except ValueError:
        limit = math.nan
    if not limit > 0:
        raise CpbenchInputError(f"CPBENCH_CPU_TFLOP_LIMIT must be a number of TFLOP > 0, got {text!r}")
    return limit


def _cell_tflop(model: ModelSpec, cell: CellSpec) -> float:
    """TFLOP of rank 0's forward of ``cell`` (the reference's work on a CPU)."""
    return forward_flops(model, all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)[0]) / 1e12


def cpu_refusal(model: ModelSpec, cell: CellSpec) -> str | None:
    """Why the CPU reference refuses ``cell`` (more TFLOP per forward for rank 0 than :func:`cpu_tflop_limit`),
    or None. Raises CpbenchInputError for a CPBENCH_CPU_TFLOP_LIMIT that is not a number > 0."""
    why = cpu_too_much(model, cell)
    return None if why is None else f"{why}: use a GPU, or shorter requests (--extend-len) or fewer (--bs)"


def cpu_too_much(model: ModelSpec, cell: CellSpec) -> str | None:
    """``"about X TFLOP per forward is too much for the CPU reference (limit L TFLOP, ...)"`` when ``cell`` is
    over :func:`cpu_tflop_limit`, else None (the start of :func:`cpu_refusal`, without what to do)."""
    tflop, limit = _cell_tflop(model, cell), cpu_tflop_limit()
    if tflop > limit:
        return (f"about {tflop:.3g} TFLOP per forward is too much for the CPU reference (limit {limit:g} TFLOP, "
                "CPBENCH_CPU_TFLOP_LIMIT)")
    return None


def cpu_longest_extend(model: ModelSpec, cp_size: int, bs: int, prefix: int = 0) -> int:
    """The longest extend length (tokens) of ``bs`` equal requests with ``prefix`` cached tokens each that the
    CPU reference runs at ``cp_size`` (rank 0's forward within :func:`cpu_tflop_limit`); 0 when none does."""
    limit = cpu_tflop_limit()
    lo, hi = 0, MAX_TOKENS  # the work grows with the length: bisect for the last length within the limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _cell_tflop(model, CellSpec(cp_size, (mid,) * bs, (prefix,) * bs)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def over_token_budget(cell: CellSpec, max_prefill_tokens: int) -> StatusPair | None:
    """``("skipped", reason)`` when ``cell``'s batch holds more extend tokens (prefix tokens are cached, not
    prefilled) than ``max_prefill_tokens`` (0: no cap), else None. SGLang's scheduler builds no prefill
    batch over its ``--max-prefill-tokens`` (a single longer request runs alone), so such a cell is not a
    batch an engine would run."""
    tokens = sum(cell.extend_lens)
    if not max_prefill_tokens or tokens <= max_prefill_tokens or cell.bs == 1:
        return None
    return Status.SKIPPED, (f"{tokens} extend tokens in one batch > --max-prefill-tokens {max_prefill_tokens}: "
                            "raise it (0 = no cap) to measure this cell")


def omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a positive int, None when unset or not one (OpenMP ignores it then too)."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def cpu_sweep_threads() -> int:
    """Intra-op threads a CPU sweep uses: ``OMP_NUM_THREADS`` when set, else 1 (one thread keeps CPU timings
    steady beside other busy processes, where OpenMP threads wait on each other; docs/design.md). A torchrun
    launch sets OMP_NUM_THREADS=1 per rank."""
    return omp_threads() or 1


class Runner:
    """Runs cells, handing each cell's rows on one backend to ``emit(rows)`` on the writer, together, as
    soon as the cell is measured (a run directory's :meth:`RunDir.append_rows` writes them at once).

    ``done`` holds row keys (schema.row_key) already on disk; those rows are not measured again.
    ``group`` says which ranks this process measures (default: every rank here, one after another).
    With ``cfg.profile`` one eager forward per rank and mode is profiled (torch.profiler) to fill the
    kernel-count columns; ``trace_dir`` (optional) receives its Chrome trace.
    """

    def __init__(self, cfg: SweepConfig, emit: Callable[[list[dict]], None], done: set | None = None,
                 trace_dir: Path | None = None, group: RankGroup | None = None, prior: dict | None = None,
                 error_dir: Path | None = None, timings: tuple[TimingFactory, ...] = ()) -> None:
        self.cfg = cfg
        self.prep = CellPrep.of(cfg)  # how the cells' inputs and ranks' work are built (commands/prepare.py)
        self.error_dir = error_dir  # where the traceback of each error row measured here is written
        self.tracebacks = Tracebacks()
        self.prior = dict(prior or {})  # row key -> the stored row a later pass folds its samples into
        self.pass_no = 1
        self._sink = emit
        self.done = done or set()
        self.trace_dir = trace_dir
        cuda = cfg.device.type == "cuda"
        self.clock = Clock(cfg.device, read_clock_mhz=(lambda: sm_clock_mhz(cfg.device)) if cuda else None)
        self.group = group if group is not None else LocalGroup(self.clock.sync)
        self._kernels_per_call: dict = {}  # kernels per call, measured once per (cell, backend, mode)
        self._inputs: tuple[CellInputs, dict] | None = None  # the current cell's, shared by its backends
        self.timings = {f.timing: f for f in timings}  # the studies' timings (measure/method.py), by timing
        missing = [t for t in cfg.timings if t not in CORE_TIMINGS and t not in self.timings]
        if missing:
            raise CpbenchInputError(f"--timing {','.join(missing)}: this command cannot time it (it runs "
                                    f"{', '.join(CORE_TIMINGS + tuple(self.timings))}); use cpbench sweep")
        self._methods: dict[str, TimingMethod | Unavailable] = {}  # the current cell's forms of them
        self.cpu_threads: int | None = None
        if cfg.device.type == "cpu":
            torch.set_num_threads(cpu_sweep_threads())
            self.cpu_threads = torch.get_num_threads()
        self.backends = {name: get_backend(name) for name in cfg.backends}
        self.mismatches = 0
        self.times = PhaseTimes()  # where this process's wall time goes (measure/walltime.py)

    # -- rows ------------------------------------------------------------------------------------
    def emit(self, rows: list[dict]) -> None:
        """Hand rows to the sink together and remember their keys (so no later status row duplicates one)."""
        if not rows:
            return
        for row in rows:
            self.done.add(row_key(row))
            self.mismatches += row.get("status") == Status.MISMATCH and self.pass_no == 1
            if self.cfg.passes > 1:
                self.prior[row_key(row)] = row
        self._sink(rows)

    def base(self, cell: CellSpec, backend: str) -> dict:
        """Columns shared by every row of ``cell`` on ``backend`` (the key without rank, mode and timing, and
        the distribution that declared the backend)."""
        c, g = self.cfg, self.group
        spec = get_spec(backend)
        return dict(model=c.model.name, backend=backend, backend_dist=spec.dist, backend_version=spec.version,
                    dtype=c.dtype,
                    launch=g.launch, world_size=g.world_size, seed=c.seed, gather=c.gather, tp_size=c.tp_size,
                    fused_order=c.fused_order,
                    **cell.key().row_columns(), page_size=c.model.page_size,
                    num_layers=c.model.num_layers)

    def ranks(self, cell: CellSpec) -> list[int]:
        """The CP ranks of ``cell`` this sweep measures (``--ranks``, or all)."""
        return [r for r in (self.cfg.ranks if self.cfg.ranks is not None else range(cell.cp_size)) if r < cell.cp_size]

    def todo(self, cell: CellSpec, rank: int, backend: str) -> list[tuple[str, str]]:
        """``(mode, timing)`` pairs of ``rank`` on ``backend`` not yet on disk; in a later pass, the ``ok`` rows
        on disk that lack this pass (measure/passes.py)."""
        base = self.base(cell, backend)
        keys = {(m, t): row_key({**base, "rank": rank, "mode": m, "timing": t})
                for m in self.cfg.modes for t in self.cfg.timings}
        if self.pass_no == 1:
            return [x for x, k in keys.items() if k not in self.done]
        return [x for x, k in keys.items() if k in self.prior and self.prior[k].get("status") == Status.OK
                and int(self.prior[k].get("passes") or 1) < self.pass_no]

    def _status_rows(self, cell: CellSpec, backend: str, ranks: list[int], status: Status, reason: str,
                     todo: dict[int, list]) -> list[dict]:
        base = self.base(cell, backend)
        return [make_row(base, rank=r, mode=m, timing=t, status=status, reason=reason)
                for r in ranks for m, t in todo[r]]

    # -- cells -----------------------------------------------------------------------------------
    def run_cell(self, cell: CellSpec, on_rank: Callable[[], None] = lambda: None, pass_no: int = 1) -> None:
        """Measure every missing row of one cell, on every backend of the sweep in turn (the cell's
        inputs built once), on the ranks this process owns; the writer emits every process's rows.
        Never raises for a cell that cannot run (CpbenchInputError propagates). ``pass_no`` > 1: time the cell's
        ok rows again and fold the samples into them (measure/passes.py)."""
        self.pass_no = pass_no
        self.group.begin_cell(cell.label(), cell.cp_size)
        self._inputs = None
        self._methods = {}
        try:
            for backend in self.backends:
                self._run_cell_on(cell, backend, on_rank)
        finally:
            self._inputs = None
            for method in self._methods.values():
                if not isinstance(method, Unavailable):
                    method.release()
            self._methods = {}
            if self.cfg.device.type == "cuda":
                torch.cuda.empty_cache()

    def _run_cell_on(self, cell: CellSpec, backend: str, on_rank: Callable[[], None]) -> None:
        g = self.group
        ranks = self.ranks(cell)
        todo = {r: self.todo(cell, r, backend) for r in ranks}
        if g.launch != "simulated":  # ranks time together: every rank measures what any rank lacks
            union = list(dict.fromkeys(x for r in ranks for x in todo[r]))
            todo = {r: union for r in ranks}
        mine = [r for r in g.local_ranks(cell.cp_size, ranks) if todo[r]]
        rows: list[dict] = []
        if any(todo.values()):
            rows = self._measure_cell(cell, backend, mine, todo, on_rank)
            self._write_tracebacks(cell, rows)
            self.tracebacks.clear()
        if self.pass_no > 1:  # fold this pass into the stored rows (a failed re-timing keeps the stored row)
            rows = [merge_pass(self.prior[row_key(r)], r) for r in rows if row_key(r) in self.prior]
        self.emit(g.collect(rows))
        for _ in range(len(g.local_ranks(cell.cp_size, ranks)) - len(mine)):
            on_rank()  # this process's ranks already on disk (Sweep.total_ranks counts them)

    def _measure_cell(self, cell: CellSpec, backend: str, mine: list[int], todo: dict, on_rank) -> list[dict]:
        g = self.group
        ok, reason = eligibility(cell.extend_lens, cell.cp_size, self.cfg.cp_rule)
        why = (None if ok else (Status.INELIGIBLE, reason)) or over_token_budget(cell, self.cfg.max_prefill_tokens) \
            or self._unsupported(cell, backend)
        if why:
            for _ in mine:
                on_rank()
            return self._status_rows(cell, backend, mine, *why, todo)
        rows: list[dict] = []
        status, (inputs, cell_metrics) = OK_PAIR, (None, {})
        if mine:
            try:
                inputs, cell_metrics = self._cell_inputs(cell)
            except CpbenchInputError:
                raise
            except Exception as e:
                status = (Status.OOM, f"out of memory building or running the cell: {one_line(e)}") \
                    if is_oom(e) else (Status.ERROR, one_line(e))
                self.tracebacks.record(one_line(e), e)
        status = g.agree_status(status)
        if status != OK_PAIR:
            for _ in mine:
                on_rank()
            return self._status_rows(cell, backend, mine, *status, todo)
        geoms = all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)
        methods = {}
        for t in dict.fromkeys(t for r in mine for _, t in todo[r] if t in self.timings):
            method = self._cell_method(t, cell, geoms[0].tokens_padded)
            if isinstance(method, Unavailable):  # the other timings still run
                rows += self._status_rows(cell, backend, mine, method.status, method.reason,
                                          {r: [x for x in todo[r] if x[1] == t] for r in mine})
                todo = {r: [x for x in todo[r] if x[1] != t] for r in todo}
            else:
                methods[t] = method
        for r in mine:
            if not todo[r]:
                on_rank()
                continue
            try:
                work = self.prep.work(inputs, geoms[r])
                rows += measure_rank(self._job(cell, backend, cell_metrics, todo[r], methods), work, g)
            except CpbenchInputError:
                raise
            except Exception as e:  # measure_rank records failures itself; this is a last resort
                self.tracebacks.record(one_line(e), e)
                rows += self._status_rows(cell, backend, [r], Status.OOM if is_oom(e) else Status.ERROR, one_line(e),
                                          todo)
            on_rank()
        return rows

    def _write_tracebacks(self, cell: CellSpec, rows: list[dict]) -> None:
        """Append the traceback of each error row measured in this process to
        ``error_dir/<cell>-r<rank>-<mode>.txt`` (cell label with ``_`` for spaces), one section per backend and
        timing. A row whose failure was met on another process's rank has none here (that process writes it)."""
        for r in rows:
            text = self.tracebacks.take(r["reason"]) if r["status"] == Status.ERROR else None
            if text is None or self.error_dir is None:
                continue
            path = self.error_dir / f"{cell.label().replace(' ', '_')}-r{r['rank']}-{r['mode']}.txt"
            try:
                self.error_dir.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as f:
                    f.write(f"# {r['backend']} {r['timing']} pass {self.pass_no}: {r['reason']}\n{text}\n")
            except OSError as e:  # the row is kept whatever happens to its traceback file
                warnings.warn(f"cannot write the traceback of an error row to {str(path)!r} ({one_line(e)}): "
                              "the row keeps its reason", CpbenchWarning, stacklevel=2)

    def _cell_inputs(self, cell: CellSpec) -> tuple[CellInputs, dict]:
        """The cell's inputs and cell-wide metrics, built on first use and kept for the cell's other
        backends (dropped by :meth:`run_cell`). Raises what building raises (OOM included)."""
        if self._inputs is None:
            t_build = time.perf_counter()
            inputs = self.prep.inputs(cell)
            self._inputs = (inputs, self._cell_metrics(inputs))
            self.times.add("build", time.perf_counter() - t_build)
        return self._inputs

    def _cell_method(self, timing: str, cell: CellSpec, tokens_padded: int) -> TimingMethod | Unavailable:
        """A study's timing for the cell (:meth:`TimingFactory.for_cell`), built on first use and kept for the cell's
        other backends; an Unavailable (agreed over the cell's ranks) when it cannot be built."""
        if timing not in self._methods:
            factory = self.timings[timing]
            t0 = time.perf_counter()
            try:
                method: TimingMethod | Unavailable = factory.for_cell(self.cfg, cell, tokens_padded, self.group)
                status = OK_PAIR
            except Unavailable as e:
                method, status = e, (e.status, e.reason)
            except CpbenchInputError:
                raise
            except Exception as e:
                method = Unavailable(Status.OOM if is_oom(e) else Status.ERROR, one_line(e))
                status = (method.status, method.reason)
            agreed = self.group.agree_status(status)
            if agreed != status and not isinstance(method, Unavailable):
                method.release()
            self._methods[timing] = method if agreed == status else Unavailable(*agreed)
            self.times.add(factory.phase, time.perf_counter() - t0)
        return self._methods[timing]

    def _job(self, cell: CellSpec, backend: str, cell_metrics: dict, todo: list,
             methods: dict[str, TimingMethod] | None = None) -> RankJob:
        c = self.cfg
        return RankJob(self.backends[backend], self.clock, c.device, c.dtype, self.base(cell, backend), cell.key(),
                       cell_metrics, todo, cell.label(),
                       timing=c.timing_policy(self.pass_no),
                       check=c.check and self.pass_no == 1, profile=c.profile and self.pass_no == 1,
                       nvtx=c.nvtx, trace_dir=self.trace_dir, tracebacks=self.tracebacks,
                       per_call_cache=self._kernels_per_call.setdefault((cell, backend), {}),
                       methods=methods or {}, times=self.times, modes=get_spec(backend).modes)

    def _unsupported(self, cell: CellSpec, backend: str) -> StatusPair | None:
        reason = self.prep.unsupported(self.backends[backend])
        if reason:
            return Status.UNSUPPORTED, reason
        if self.cfg.device.type == "cpu":  # the reference on a CPU: refuse what would run for hours
            why = cpu_refusal(self.cfg.model, cell)
            if why:
                return Status.UNSUPPORTED, why
        return None

    def _cell_metrics(self, inputs: CellInputs) -> dict:
        """Per-cell page-table and KV columns: bytes of every table (the SWA pool's too with --swa-pool), the
        time of duplicating all of them (the fused call's cat(t, t) of each), one layer's KV bytes and the
        KV caches of both pools."""
        tables = [t for t in (inputs.block_tables, inputs.swa_block_tables) if t is not None]
        swa = inputs.swa_block_tables
        return dict(page_table_bytes=sum(table_bytes(t) for t in tables),
                    swa_page_table_bytes=table_bytes(swa) if swa is not None else 0,
                    kv_cache_bytes=inputs.kv_cache_bytes, context_len=inputs.context_len,
                    kv_buffers=inputs.kv_buffer_count, swa_kv_buffers=len(inputs.swa_kv_buffers),
                    dup_copy_us=time_op_us(lambda: [duplicate_block_tables(t) for t in tables], self.clock))
