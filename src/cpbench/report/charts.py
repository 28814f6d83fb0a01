"""Every chart of a run, PNG + SVG into ``RUN/plots/`` (no torch; matplotlib on the Agg canvas)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from pathlib import Path

import pandas as pd

from cpbench.domain.modes import Mode, Status
from cpbench.results.store import RunDir, load_run
from cpbench.report.costs import counts_missing, kernels_chart, memory_chart
from cpbench.report import style
from cpbench.report.data import groups, on_cpu, one_view, prepare
from cpbench.report.dist_data import has_phases
from cpbench.report.gather import gather_share_chart
from cpbench.report.latency import latency_chart, speedup_heatmap
from cpbench.report.memory import setup_memory_chart
from cpbench.report.overhead import balance_chart, overhead_chart
from cpbench.report.phases import phases_chart, timeline_chart
from cpbench.report.resources import throughput_chart
from cpbench.report.segments import has_segment_axis, segments_chart
from cpbench.report.study import StudyReport
from cpbench.report.tables import modes_text

# file stem, function, title, one-line caption for the report
CHARTS = (
    ("latency", latency_chart, "critical-path latency (slowest rank), median with p10–p90",
     "Forward latency on the slowest rank per mode (ms; the axis says when it is a log scale), two-call solid, "
     "fused dashed with open markers; whiskers: p10–p90 of the slowest rank."),
    ("speedup", speedup_heatmap, "fused vs two-call on the critical path",
     "The share of the two-call time fused saves (+) or costs (−) on the critical path (slowest rank); blue: fused "
     "faster, red: fused slower, neutral with ≈: a tie (95 % interval contains 0), grey: did not run."),
    ("throughput", throughput_chart, "attention TFLOP/s per GPU on the critical path",
     "All ranks' attention FLOPs / (cp_size × slowest rank's latency), two-call solid, fused dashed; right axis: "
     "% of the matmul peak measured at the start of the run."),
    ("kernels", kernels_chart, "attention kernels per forward, per rank",
     "Attention kernels per rank (GPU executions from the profiler), with totals over all ranks."),
    ("memory", memory_chart, "page table vs duplicated page table",
     "Page table [bs, W] vs the fused path's duplicated [2·bs, W]: bytes, % of the KV cache, copy time."),
    ("setup_memory", setup_memory_chart, "device memory each mode holds, by kind of allocation",
     "Measured device memory (CUDA allocator) each mode's setup holds on its most loaded rank, by kind, with "
     "the first forward's transient peak hatched; fused bars give the duplicated page table's share."),
    ("overhead", overhead_chart, "GPU vs host time per forward",
     "GPU forward latency (those of eager, graph and breakable the run timed; breakable: the whole layer) against "
     "host setup and launch time, per mode."),
    ("balance", balance_chart, "zigzag balance across ranks",
     "Per-rank latency of the longest cell, and slowest/fastest rank ratio for every cell."),
)
# torchrun charts (one process per rank): drawn only for a (model, backend) whose eager torchrun rows carry
# phase times (gather_us, kv_write_us, attn_us); no file otherwise. sim_vs_real (gather.sim_vs_real_chart)
# needs a second, simulated run and is drawn by the report (``cpbench report --simulated RUN``).
DIST_CHARTS = (
    ("phases", phases_chart, "per-rank phases of one forward (eager, torchrun)",
     "Per cell, rank and mode: attention, KV write, all-gather and the part of it spent waiting for slower "
     "ranks (ms per forward, sums over layers; medians of separately timed forwards), with each rank's forward "
     "latency (median, p10–p90) as a black whisker."),
    ("timeline", timeline_chart, "one forward, layer by layer (largest cell)",
     "Average per-layer phase times (phase / layers) laid out in order per rank: a sketch, not a trace. The "
     "phases are timed in separate forwards with a sync between steps, so they can add up to more than the "
     "forward's measured latency (the black whisker), which runs them back to back."),
    ("gather_share", gather_share_chart, "all-gather share of the forward (eager, torchrun)",
     "gather_us / forward latency per rank (median over ranks, bars min..max over ranks) vs tokens."),
)


# run-wide charts (every backend in one figure): stem, function, title, caption; drawn on a GPU run only when
# the run holds the axis they need
RUN_CHARTS = (
    ("segments", segments_chart, "fusion vs the fused call's segment count",
     "The share of the two-call time fused saves (whiskers: 95 % interval) and the fused forward's latency per "
     "segment against the fused call's segments (2·bs), a colour per backend, graph solid / eager dotted with open "
     "markers: where fusion stops paying. A host-bound eager effect (it measures the CPU) is a cross off the line, "
     "drawn at the axis edge with its value when it lies outside the others' range."),
)


def run_charts(df: pd.DataFrame, cpu: bool = False) -> tuple:
    """The run-wide charts a prepared frame gets (none on a CPU, where no speedup is claimed)."""
    return () if cpu or df.empty or not has_segment_axis(df) else RUN_CHARTS


# A CPU run (the torch reference) is a functional check, not a benchmark: its charts say so, in CPU words.
CPU_CHARTS = {
    "latency": (latency_chart, "forward latency, slowest rank (CPU: a functional check, not a benchmark)",
                "Forward latency on the slowest rank per mode (ms; the axis says when it is a log scale), whiskers: "
                "p10–p90; CPU timings move by tens of percent between runs: a functional check, not a benchmark."),
    "speedup": (partial(speedup_heatmap, neutral=True),
                "fused vs two-call latency (CPU: a functional check, not a speedup)",
                "The share of the two-call time fused saves (+) or costs (−), slowest rank, on a CPU, uncoloured: CPU "
                "timings move by tens of percent, so this is no speedup claim; grey hatched: did not run."),
    "kernels": (partial(kernels_chart, calls=True), "attention calls per forward, per rank",
                "Attention calls of the backend per rank (a CPU runs no GPU kernels), with totals over all "
                "ranks."),
    "memory": (memory_chart, "page table vs duplicated page table",
               "Page table [bs, W] vs the fused path's duplicated [2·bs, W]: bytes and % of the KV cache (exact), "
               "and the copy time (a CPU's: noise at these sizes, not a cost)."),
    "phases": (phases_chart, "per-rank phases of one forward (eager, torchrun; CPU: a functional check)",
               "Per cell, rank and mode: attention, KV write, all-gather and its wait, with each rank's forward "
               "latency as a black whisker. On a CPU the phases are timed in separate forwards and need not add "
               "up to the whisker, and which rank waits is noise."),
    "gather_share": (gather_share_chart, "all-gather share of the forward (eager, torchrun; CPU: a functional check)",
                     "gather_us / forward latency per rank vs tokens, on a CPU (gloo): which share the gather takes "
                     "there says nothing of NCCL on GPUs; a functional check, not a benchmark."),
    "overhead": (partial(overhead_chart, cpu=True), "forward vs host time per forward",
                 "Forward latency (eager, and breakable: the whole layer, those the run timed) against host setup "
                 "(metadata, page tables), per mode (on a CPU the forward runs on the host: there is no separate "
                 "launch time)."),
}


# not drawn on a CPU (no placeholder either): no peak to compare with, no allocator statistics, and rank-to-rank
# differences of CPU timings are noise, not the layout's balance (zigzag balances causal work by design)
CPU_SKIP = ("throughput", "setup_memory", "balance")


def not_drawn(rows: pd.DataFrame, cpu: bool = False, studies: tuple[StudyReport, ...] = ()) -> list[tuple[str, str]]:
    """``[(chart, why)]``: the charts of one prepared (model, backend) group with nothing of its rows to draw, which
    are left out (the report says why) rather than drawn empty: ``kernels`` without attention counts
    (:func:`cpbench.report.costs.counts_missing`: a ``--timing breakable`` run has none), ``speedup`` without both
    two-call and fused, and each study's own (``StudyReport.not_drawn``). A group none of whose rows ran keeps
    every chart (each says so in its own panel)."""
    out = []
    why = counts_missing(rows, calls=cpu)
    if why:
        out.append(("kernels", why))
    modes = set(rows["mode"]) if len(rows) and "mode" in rows else set()
    if modes and (rows["status"] == Status.OK).any():
        if not {Mode.TWO_CALL, Mode.FUSED} <= modes:
            out.append(("speedup", f"the run measured {modes_text(modes)} only: no fused-vs-two-call effect to draw"))
        out += [x for st in studies for x in st.not_drawn(rows, cpu)]
    return out


def omitted_charts(df: pd.DataFrame, cpu: bool = False,
                   studies: tuple[StudyReport, ...] = ()) -> list[tuple[str, str]]:
    """``[(stem, why)]`` of a prepared frame: each group's :func:`not_drawn` charts, under their file stems."""
    return [(f"{name}{suffix}", why) for _, _, suffix, rows in groups(df)
            for name, why in not_drawn(rows, cpu, studies)]


def charts_for(rows: pd.DataFrame, cpu: bool = False, studies: tuple[StudyReport, ...] = ()) -> tuple:
    """The chart table of one prepared (model, backend) group: the studies' leading charts
    (``StudyReport.lead_charts``), ``CHARTS``, plus ``DIST_CHARTS`` when its torchrun rows carry phase times, then
    each study's (``StudyReport.charts``); with ``cpu``, the CPU wording and functions of ``CPU_CHARTS``; without the
    charts it has nothing to draw on (:func:`not_drawn`)."""
    table = CHARTS + DIST_CHARTS if len(rows) and has_phases(rows) else CHARTS
    if cpu:  # throughput, measured memory and balance say nothing on a CPU (CPU_SKIP)
        table = tuple((name, *CPU_CHARTS[name]) if name in CPU_CHARTS else (name, fn, title, caption)
                      for name, fn, title, caption in table if name not in CPU_SKIP)
    table = tuple(c for st in studies for c in st.lead_charts(rows, cpu)) + table
    table += tuple(c for st in studies for c in st.charts(rows, cpu))
    empty = {name for name, _ in not_drawn(rows, cpu, studies)}
    return tuple(c for c in table if c[0] not in empty)


def chart_stems(df: pd.DataFrame, cpu: bool = False,
                studies: tuple[StudyReport, ...] = ()) -> list[tuple[str, str, str, str]]:
    """``[(stem, model, backend, caption)]`` for a prepared frame, in render order."""
    per_group = [(f"{name}{suffix}", model, backend, caption) for model, backend, suffix, rows in groups(df)
                 for name, _, _, caption in charts_for(rows, cpu, studies)]
    return [(name, "", "", caption) for name, _, _, caption in run_charts(df, cpu)] + per_group


def render_frame(df: pd.DataFrame, out_dir: Path, cpu: bool = False, device: str = "",
                 workers: int | None = 1, studies: tuple[StudyReport, ...] = ()) -> list[Path]:
    """Draw every chart of a results frame (any shape, even empty) into ``out_dir``.

    Args: df: a results frame (``load_run``); out_dir: created if missing; cpu: the run is on a CPU
    (``data.on_cpu(manifest)``): CPU wording, no balance drawn from CPU noise; device: the GPU (or CPU) the run
    measured on (the manifest's ``gpu_name``), named in every chart's title with the model; studies: the optional
    studies whose charts to draw too (:class:`~cpbench.report.study.StudyReport`); workers: processes
    that draw the charts (1, the default: this one; None: one per core up to :data:`MAX_WORKERS`, serial on a
    machine of fewer than :data:`MIN_PARALLEL` cores, as the CLI asks). Drawing, not data, is a chart's cost (Agg
    at 160 dpi), so a GPU box's idle cores take it off the main job's wall time; the files are the same either
    way. Worker processes import the calling script as ``__mp_main__``: the CLI's entry points are guarded; a
    user script passing more than 1 needs an ``if __name__ == "__main__":`` guard.
    Returns every written path (PNG and SVG per chart). One chart set per (model, backend); file stems
    get a ``_<model>_<backend>`` suffix when the run holds more than one.
    """
    d = prepare(df)
    tasks = []
    on = f" · {device}" if device else ""
    for model, backend, suffix, rows in groups(d):
        head = f"{model} · {backend}{on}: " if model or backend else (f"{device}: " if device else "")
        for name, fn, title, _ in charts_for(rows, cpu, studies):
            tasks.append((fn, rows, Path(out_dir), f"{name}{suffix}", head + title))
    models = ", ".join(sorted({str(m) for m in d["model"].dropna()})) if "model" in d and len(d) else ""
    for name, fn, title, _ in run_charts(d, cpu):
        tasks.append((fn, d, Path(out_dir), name, f"{models}{on}: {title}" if models or device else title))
    if workers is None:
        cores = os.cpu_count() or 1
        workers = min(cores, MAX_WORKERS) if cores >= MIN_PARALLEL else 1
    workers = min(workers, len(tasks))
    if workers > 1:
        try:
            return _render_parallel(tasks, workers)
        except (OSError, ValueError, BrokenProcessPool):  # no process pool (a sandbox, no forkserver): draw here
            pass
    return [p for task in tasks for p in _render_one(*task)]


MAX_WORKERS, MIN_PARALLEL = 8, 4


def _render_one(fn, rows: pd.DataFrame, out_dir: Path, name: str, title: str) -> list[Path]:
    with one_view():  # a worker memoises the frame's critical path for its own charts
        return fn(rows, out_dir, name, title)


def _render_parallel(tasks: list[tuple], workers: int) -> list[Path]:
    """The charts of ``tasks`` drawn by ``workers`` processes forked from a server that imported this module
    once (no CUDA state reaches them); paths in task order. Raises what a chart raises."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [pool.submit(_render_one, *task) for task in tasks]
        return [p for f in futures for p in f.result()]


def device_name(manifest: dict) -> str:
    """The device a run measured on, for chart titles: the GPU's name without the vendor (``H200``), ``CPU``, or
    "" when the manifest does not say."""
    if on_cpu(manifest):
        return "CPU"
    name = str(manifest.get("gpu_name") or "")
    return name.replace("NVIDIA ", "")


def render_all(run_dir: str | Path, studies: tuple[StudyReport, ...] = (), workers: int | None = 1) -> list[Path]:
    """Load ``run_dir`` and write every chart to ``run_dir/plots/`` (PNG + SVG), the ``studies``' too.

    Returns the written paths.
    Raises: CpbenchInputError (from ``load_run``): missing directory, no results, other schema version.
    """
    df, manifest = load_run(run_dir)
    with one_view():
        return render_frame(df, RunDir(run_dir).plots, cpu=on_cpu(manifest), device=device_name(manifest),
                            studies=studies, workers=workers)
