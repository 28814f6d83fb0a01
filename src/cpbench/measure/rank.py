"""One rank of one cell, measured: :func:`measure_rank` returns that rank's rows (no files, no loop
over ranks).

Phases, each followed by an agreement over the cell's CP ranks (so a failing rank fails the mode or
the cell on every rank, and no rank enters a collective the others will not reach):
prepare (metadata, page tables, plans; host-timed, device bytes by part) -> first forward (JIT load,
transient memory peak) -> checks (fp32 reference, fused vs two-call) -> kernel counts and per-layer
times (torch.profiler) -> timing
(eager and/or CUDA graph, ABBA, agreed repeat counts, a barrier before each sample; host enqueue time
inside the samples; a timing a study adds runs through its :class:`~cpbench.measure.method.TimingMethod`) -> per-phase
times (gather / KV write / attention, when the forward has communication steps). Per-layer-kind times
(window / full layers, for a model with both) come from the profiled forward.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from cpbench.domain.cells import CellKey
from cpbench.domain.modes import Mode, MODES, Status, Timing
from cpbench.kernels import check as checks
from cpbench.kernels.backends.base import Backend, Prepared
from cpbench.kernels.backends.registry import names_with_mode
from cpbench.domain.tolerance import reference_tolerance
from cpbench.measure.env import sm_clock_mhz
from cpbench.measure.failures import Tracebacks
from cpbench.domain.flops import forward_flops
from cpbench.measure.kernel_counts import COUNT_COLUMNS, count_kernels
from cpbench.measure.layer_kinds import KIND_COLUMNS
from cpbench.measure.memory import SetupMemory, memory_columns
from cpbench.measure.method import TimingMethod
from cpbench.measure.phases import phase_times_us
from cpbench.results.policy import TimingPolicy
from cpbench.results.rows import make_row
from cpbench.ranks.group import OK_PAIR, Exchange, PeerFailure, RankGroup, StatusPair
from cpbench.measure.timing import (Clock, capture_graph, release_graphs, summarize,
                                   time_interleaved)
from cpbench.measure.walltime import PhaseTimes
from cpbench.kernels.workload import RankWork
from cpbench.errors import CpbenchInputError, one_line

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CORE_TIMINGS = (Timing.EAGER, Timing.GRAPH)  # timed here; any other timing is a study's (RankJob.methods)


@dataclass
class RankJob:
    """Everything :func:`measure_rank` needs besides the rank's work and group.

    Attributes:
        base: key and context columns shared by every row of the cell (model, backend, dtype, launch,
            world_size, seed, gather, cp_size, bs, max_extend_len, prefix_len, extend_lens, page_size, num_layers).
        key: the cell's key (NVTX payloads name the cell by it).
        cell_metrics: cell metrics (page-table bytes, KV-cache bytes, duplication copy µs, ...).
        todo: ``(mode, timing)`` pairs to measure for this rank.
        label: the cell's label, e.g. ``"cp4 bs1 extend8192"`` (forward labels add rank and mode).
    """

    backend: Backend
    clock: Clock
    device: torch.device
    dtype: str
    base: dict
    key: CellKey
    cell_metrics: dict
    todo: list[tuple[str, str]]
    label: str
    timing: TimingPolicy = field(default_factory=TimingPolicy)  # warm-up, budget of this pass, floors
    check: bool = True
    profile: bool = True
    nvtx: bool = False
    trace_dir: Path | None = None
    per_call_cache: dict = field(default_factory=dict)
    methods: dict[str, TimingMethod] = field(default_factory=dict)  # a study's timing -> its form for this cell
    times: PhaseTimes = field(default_factory=PhaseTimes)  # harness wall time by phase (measure/walltime.py)
    tracebacks: Tracebacks = field(default_factory=Tracebacks)  # of the failures that became error rows
    modes: tuple[str, ...] = tuple(MODES)  # the modes the backend has a call for (its BackendSpec's)


def measure_rank(job: RankJob, work: RankWork, group: RankGroup) -> list[dict]:
    """Measure one rank of one cell; return its rows (one per ``job.todo`` entry), never raising for a
    mode or cell that cannot run (those become status rows). CpbenchInputError propagates.

    Every agreement (``group.agree_status``) is reached by every rank of the cell in the same order.
    """
    rank = work.geometry.rank
    modes = list(dict.fromkeys(m for m, _ in job.todo))
    rows: list[dict] = []
    status = {m: OK_PAIR for m in modes}
    for m in modes:  # a mode the backend has no call for (its spec's modes) is a fact, not a failure
        if m not in job.modes:
            backend = job.base.get('backend', job.backend.name)
            status[m] = (Status.UNSUPPORTED, f"{backend} has no {m} call (backends with one: "
                                             f"{', '.join(names_with_mode(m)) or 'none'})")

    def fail_open(run: Callable[[str], None], agreeing: bool = False) -> None:
        """run(mode) for every mode still ok, then agree. ``agreeing``: the run holds collectives (the
        exchange's gathers), so it is agreed inside and at its end (:func:`attempt_agreed`)."""
        for m in modes:
            if status[m] == OK_PAIR:
                ex = exchanges.get(m) if agreeing else None
                status[m] = attempt_agreed(lambda: run(m), ex, group, job.tracebacks) if ex is not None \
                    else attempt(lambda: run(m), job.tracebacks)
        oom = next((s for s in status.values() if s[0] == Status.OOM), None)
        for m in modes:  # an OOM anywhere fails the whole cell (memory is shared by the modes)
            status[m] = group.agree_status(oom or status[m])

    prepared: dict[str, Prepared] = {}
    info: dict[str, dict] = {m: {} for m in modes}

    exchanges: dict = {}
    setup_mem: dict[str, dict] = {}

    def prepare(m: str) -> None:
        with SetupMemory(job.device) as mem:
            prep = job.backend.prepare(work, m)
            with mem.part("comm"):
                exchanges[m] = exchange = group.exchange(work, m)
        prepared[m] = prep.with_steps_before(exchange) if exchange is not None else prep
        info[m].update(exchange.columns if exchange is not None else {})
        info[m].update(prep.columns)  # e.g. kernel_impl: which FlashAttention-3 build ran
        setup_mem[m] = mem.finish(prep.setup_mem)

    times = job.times
    with times("prepare"):
        fail_open(prepare)
    with times("check"):
        fail_open(lambda m: exchanges[m].check() if exchanges.get(m) is not None else None, agreeing=True)
        ref_cache: dict = {}  # the reference rows, computed for the first mode and reused by the second
        # the attention outputs of this eager forward: what a study's timing must leave there too
        eager_outputs: dict[str, dict] = {m: {} for m in modes} if job.check and any(
            job.methods[t].keeps_first_outputs for _, t in job.todo if t in job.methods) else {}
        fail_open(lambda m: info[m].update(_first_forward(job, work, prepared[m], setup_mem.get(m), ref_cache,
                                                          eager_outputs.get(m))), agreeing=True)
        ref_cache.clear()
        if job.check and all(m in prepared and status[m] == OK_PAIR for m in MODES):
            status_diff = attempt(lambda: info[Mode.FUSED].update(
                diff_vs_two_call=checks.max_abs_diff(prepared[Mode.FUSED], prepared[Mode.TWO_CALL])), job.tracebacks)
            if status_diff != OK_PAIR:
                status[Mode.FUSED] = status_diff
    for m in modes:  # the diff check is local; agree so every rank keeps the same modes
        status[m] = group.agree_status(status[m])
    if job.profile:  # after the checks: profiling reruns the forward
        def count(m: str) -> None:
            try:
                info[m].update(count_kernels(prepared[m], f"{job.label} r{rank} {m}", job.device,
                                             job.trace_dir, job.per_call_cache, m, work.model.window_left_per_layer))
            except Exception as e:
                if is_oom(e):
                    raise
                raise StatusError(f"kernel count failed: {one_line(e)}") from e
        with times("profile"):
            fail_open(count)
    flops = forward_flops(work.model, work.geometry)
    for timing in dict.fromkeys(t for _, t in job.todo):
        runnable = [m for m in modes if status[m] == OK_PAIR and (m, timing) in job.todo]
        method = job.methods.get(timing)  # a study's timing (measure/method.py), or None: eager or graph
        with times("capture"):
            fns, graph_status = method.callables(job, work, prepared, runnable, group) if method is not None \
                else _timed_fns(job, work, prepared, runnable, timing, group)
        clk0 = sm_clock_mhz(job.device)
        samples, stop, measured_with = {}, {}, {}

        def timer(variants: dict, info: dict) -> dict:
            return time_interleaved(
                variants, job.clock, warmup=job.timing.warmup, budget_ms=job.timing.pass_budget_ms,
                min_reps=job.timing.min_reps(job.clock.cuda), agree=group.agree, barrier=group.barrier,
                min_stop=job.timing.min_stop, rel_ci=job.timing.rel_ci, info=info, times=times)

        def measure() -> None:
            if method is None:
                samples.update(timer(fns, stop))
                return
            for into, got in zip((samples, stop, measured_with), method.samples(job, work, fns, timer)):
                into.update(got)

        if fns:
            st = group.agree_status(attempt(measure, job.tracebacks))
            if st != OK_PAIR:
                graph_status.update({m: st for m in fns})
                samples = {}
        clk1 = sm_clock_mhz(job.device)
        t_extra = time.perf_counter()
        phases: dict = {}
        if samples and timing == Timing.EAGER and any(s.kind != "attention" for s in prepared[runnable[0]].layers[0]):
            st = attempt(lambda: phases.update(
                {m: phase_times_us(prepared[m], job.clock, barrier=group.barrier) for m in samples}))
            if group.agree_status(st) != OK_PAIR:  # phase times are extra columns: the rows stand without them
                phases = {}
        if samples and method is not None:
            st = attempt(lambda: phases.update({m: method.columns(job, work, m, measured_with.get(m, {}),
                                                                  eager_outputs.get(m), prepared[m], group)
                                                for m in samples}))
            if group.agree_status(st) != OK_PAIR:  # the method's further columns are extra; its own are not
                phases = {m: dict(method.columns_always) for m in samples}
        times.add("extra", time.perf_counter() - t_extra)
        release_graphs()  # reset captured graphs before any later collective or teardown
        for m, t in job.todo:
            if t != timing:
                continue
            st = status.get(m, OK_PAIR) if status.get(m, OK_PAIR) != OK_PAIR else graph_status.get(m, OK_PAIR)
            if st != OK_PAIR or m not in samples:
                st = st if st != OK_PAIR else (Status.ERROR, "not timed")
                rows.append(make_row({**job.base, "fused_order": work.fused_order}, rank=rank, mode=m, timing=t,
                                     status=st[0], reason=st[1]))
                continue
            rows.append(_measured_row(job, work, m, timing, samples[m], prepared[m], info[m], flops, clk0, clk1,
                                      {**phases.get(m, {}), **stop.get(m, {})}, method))
    return rows


class StatusError(RuntimeError):
    """A failure whose message is the status reason as it stands (no exception type prefixed)."""


def attempt(fn: Callable[[], None], tracebacks: Tracebacks | None = None) -> StatusPair:
    """Run ``fn``; the status it ends with (OOM -> ``oom``, other exceptions -> ``error``, their traceback
    kept in ``tracebacks`` under the row's reason). CpbenchInputError (bad input) propagates."""
    try:
        fn()
        return OK_PAIR
    except CpbenchInputError:
        raise
    except StatusError as e:
        return Status.ERROR, str(e)
    except PeerFailure as e:
        return e.status
    except Exception as e:
        if is_oom(e):
            return Status.OOM, f"out of memory building or running the cell: {one_line(e)}"
        if tracebacks is not None:
            tracebacks.record(one_line(e), e)
        return Status.ERROR, one_line(e)


def prefixed(st: StatusPair, prefix: str, tracebacks: Tracebacks) -> StatusPair:
    """An ``error`` status with ``prefix`` before its reason (its traceback filed under the new reason)."""
    if st[0] != Status.ERROR:
        return st
    tracebacks.alias(st[1], f"{prefix}: {st[1]}")
    return Status.ERROR, f"{prefix}: {st[1]}"


def attempt_agreed(fn: Callable[[], None], exchange: Exchange, group: RankGroup,
                    tracebacks: Tracebacks | None = None) -> StatusPair:
    """:func:`attempt` of ``fn`` whose exchange runs collectives, agreed on every rank of the cell: inside
    ``exchange.agreeing()`` each gather is preceded by an agreement, and this rank's status is agreed at
    the end. A rank that fails mid-forward (an OOM in one layer) thus makes its failure its next
    agreement, which the others meet before their next gather (PeerFailure) or at their end: every rank
    leaves the forward with the same status, and none waits in a gather the failed rank never reaches."""
    met: list[StatusPair] = []

    def run() -> None:
        try:
            fn()
        except PeerFailure as e:  # already agreed, at the agreement that met it
            met.append(e.status)

    with exchange.agreeing():
        st = attempt(run, tracebacks)
    return met[0] if met else group.agree_status(st)


def _first_forward(job: RankJob, work: RankWork, prep: Prepared, setup_mem: dict | None = None,
                   ref_cache: dict | None = None, keep_outputs: dict | None = None) -> dict:
    """The mode's first forward (it also loads the kernels): its memory columns, setup times and the fp32 check;
    ``keep_outputs`` (when given) receives copies of the attention outputs it leaves (local row order)."""
    dev = job.device
    out: dict = {"setup_us_" + k: v for k, v in prep.setup_us.items()}
    out["setup_us_total"] = sum(prep.setup_us.values())
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
    prep.forward()  # also JIT-loads kernels
    job.clock.sync()
    forward_bytes = (torch.cuda.max_memory_allocated(dev) - before) if dev.type == "cuda" else math.nan
    out.update(memory_columns(setup_mem, forward_bytes))
    if keep_outputs is not None:  # after the peak is read: the copies are the check's, not the forward's
        keep_outputs.update({w: o.clone() for w, o in prep.local_outputs().items()})
    out["max_abs_err"] = checks.max_abs_error(work, prep, cache=ref_cache) if job.check else math.nan
    return out


def _timed_fns(job: RankJob, work: RankWork, prepared: dict, modes: list[str], timing: str,
               group: RankGroup) -> tuple[dict, dict]:
    """Zero-argument callables to time per mode, and the status of modes that could not be set up
    (CUDA graph capture fails). Capture is agreed: a mode whose capture fails on any rank is dropped
    on every rank. A study's timing sets its own up (TimingMethod.callables)."""
    fns, status = {}, {}
    for m in modes:
        prep = prepared[m]
        if timing == Timing.EAGER:
            fns[m] = prep.forward
            if job.nvtx:  # NVTX ranges around the timed forwards (their cost: profiles.ranges.range_overhead_us)
                from cpbench.profiles.ranges import annotated_forward

                g = work.geometry
                fns[m] = annotated_forward(prep, forward_label(job.label, g.rank, m, Timing.EAGER),
                                           job.key.as_json(rank=g.rank), nvtx_on=True, record_functions=False)
            continue
        # attention only: no side-stream warm-up, the first forward ran this mode already (workspaces, JIT
        # modules loaded; verified on the H200). A forward with a collective keeps torch's side-stream
        # warm-up: capture without it was not run on 2 GPUs.
        warm = 1 if any(s.kind != "attention" for s in prep.layers[0]) else 0
        group.barrier()  # a collective inside the graph: every rank captures together
        holder = {}
        st = attempt(lambda: holder.update(fn=capture_graph(prep.forward, warmup=warm)), job.tracebacks)
        st = prefixed(st, "CUDA graph capture failed", job.tracebacks)
        st = group.agree_status(st)
        if st == OK_PAIR:
            fns[m] = holder["fn"]
        else:
            status[m] = st
    return fns, status


def forward_label(cell_label: str, rank: int, mode: str, timing: str = Timing.EAGER) -> str:
    """The NVTX / record_function label of one forward, e.g. ``cp4 bs1 extend8192 r0 fused eager`` (the
    nsys cross-check matches ranges by this text)."""
    return f"{cell_label} r{rank} {mode} {timing}"


def _measured_row(job: RankJob, work: RankWork, mode, timing, xs, prep: Prepared, info, flops, clk0, clk1,
                  phases: dict, method: TimingMethod | None = None) -> dict:
    """The row of one timed (mode, timing): what was measured, status ``ok`` or ``mismatch`` (outputs
    beyond the dtype's tolerance against the fp32 reference, or fused vs two-call)."""
    g = work.geometry
    fused_dup = mode == Mode.FUSED and g.cp_size > 1
    measured = {**summarize(xs), "samples_us": [round(x, 3) for x in xs], "flops": flops, **job.cell_metrics,
                "dup_copy_us": job.cell_metrics["dup_copy_us"] if fused_dup else 0.0,
                "tokens_logical": g.tokens_logical, "tokens_padded": g.tokens_padded, "max_kv_len": g.max_kv_len,
                "calls_per_layer": prep.calls_per_layer, "steps_per_layer": prep.steps_per_layer,
                "sm_clock_mhz_before": clk0, "sm_clock_mhz_after": clk1, **info, **phases}
    if timing != Timing.EAGER:  # kernels and layer times come from the profiled eager forward (no ranges in a graph)
        for k in COUNT_COLUMNS:
            measured[k] = math.nan
        for k in KIND_COLUMNS.values():
            if k not in phases:  # a study's timing may measure its own (TimingMethod.columns)
                measured.pop(k, None)
    if method is not None:  # the forward's FLOPs: attention and what the method runs beside it
        measured["flops"] = flops + method.extra_flops
    if method is None or not method.keeps_host_samples:
        measured.pop("host_samples_us", None)
    tol = reference_tolerance(job.dtype, job.backend.name)
    err = measured.get("max_abs_err", math.nan)
    diff = max(measured.get("diff_vs_two_call", 0.0), measured.get("diff_vs_eager", 0.0))
    status, reason = Status.OK, ""
    if job.check and not (err <= tol and diff <= tol):  # NaN fails both comparisons
        status, reason = Status.MISMATCH, (f"max |err| {err:.3g} (fused vs two-call, or {timing} vs eager: "
                                           f"{diff:.3g}) > tolerance {tol:g} against the fp32 torch reference")
    return make_row({**job.base, "fused_order": work.fused_order}, rank=g.rank, mode=mode, timing=timing,
                    status=status, reason=reason, measured=measured)


def is_oom(e: BaseException) -> bool:
    """CUDA OOM, or a CPU allocation failure (torch raises a plain RuntimeError for those)."""
    text = str(e).lower()
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(e, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))
