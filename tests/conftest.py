import copy
import gc
import math
import os
from pathlib import Path

import pytest


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# `python -m pytest -q -m quick`: a first check in under a minute on an idle 2-core machine (README): the pure
# layers (geometry, rules, schema, statistics, verdicts, config reading), one CPU sweep, the report's golden file
QUICK_MODULES = {"test_geometry", "test_eligibility", "test_lengths", "test_layer_rest", "test_schema",
                 "test_uncertainty", "test_hf_config", "test_worksplit", "test_report_golden",
                 "test_passes", "test_tp"}


def pytest_collection_finish():
    """Once the tests are collected (in each worker; not in pytest-xdist's controller): one intra-op thread
    (OMP_NUM_THREADS below), the heap frozen for the garbage collector (:func:`_frozen_heap`), and sweeps run
    in this process measure the matmul peak once (:func:`_one_gemm_peak_per_process`)."""
    import torch

    torch.set_num_threads(1)
    _frozen_heap()
    _one_gemm_peak_per_process()


def _frozen_heap() -> None:
    """Everything alive once the tests are collected (torch, pandas, matplotlib, scipy, the test modules) is
    moved out of the garbage collector's reach (``gc.freeze``), and a full collection waits for 100 young ones
    instead of 10: each full collection then walks what the tests made, not the whole heap again. A test
    process spent about 10 % of its CPU time in the collector before, half of it in full collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 100)


def pytest_collection_modifyitems(config, items):
    # the slow tests (seconds each: a process started, a sweep run, charts drawn) first, each group in collection
    # order: with pyproject's --maxschedchunk 2 the two workers share them from the start and then both end on
    # tests of a fraction of a second, instead of one worker finishing a queue of slow ones while the other waits
    slow = [i.get_closest_marker("slow") is not None for i in items]
    items[:] = [i for i, s in zip(items, slow) if s] + [i for i, s in zip(items, slow) if not s]
    quick = pytest.mark.quick
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in QUICK_MODULES:
            item.add_marker(quick)
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The CPU reference runs many small ops: one intra-op thread is faster and far steadier on small CI
# machines, where several threads contend for 2 cores (pytest-xdist runs 2 workers). A CPU sweep run in
# a test keeps that one thread: the runner honours OMP_NUM_THREADS. Set here, before a test module imports
# torch; torch.set_num_threads(1) follows once the tests are collected (pytest_collection_finish), so that
# pytest-xdist's controller, which runs no test, starts the workers without importing torch first.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def text_reports(monkeypatch):
    """Reports written in this process (``cpbench report``, a sweep's closing report) write report.md only and
    draw no chart (``write_report(..., charts=False)``): for tests that assert on the report's text, since
    drawing the charts is most of a report's time. Tests that import ``write_report`` themselves pass
    ``charts=False`` instead."""
    from cpbench.report import run_report

    write = run_report.write_report
    monkeypatch.setattr(run_report, "write_report", lambda *a, **kw: write(*a, **{"charts": False, **kw}))


@pytest.fixture
def undrawn_charts(monkeypatch):
    """Chart functions build their figures from the rows as usual, but ``style.save`` neither draws nor writes
    them: it returns the PNG and SVG paths it would have written. For tests that assert on which charts a
    run gets (names, counts) or on the data path behind them, not on the files."""
    from cpbench.report import style

    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: [Path(out_dir) / f"{name}.png",
                                                                    Path(out_dir) / f"{name}.svg"])


@pytest.fixture
def rough_charts(monkeypatch):
    """``style.save`` draws every figure as ``style.save`` does (title fitted, every artist rendered by Agg) but
    writes one small PNG at 20 dpi and no SVG, and returns that one path. For tests that a chart survives
    odd rows (the drawing is what fails), or that write a report with its charts and check the text, the rows
    or which files exist, not the files' content: a full PNG and SVG is drawn once, in
    ``test_cli_plot_writes_every_chart_and_report_without_torch``."""
    from cpbench.report import style

    def save(fig, out_dir, name):
        style.fit_suptitle(fig)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        png = Path(out_dir) / f"{name}.png"
        fig.savefig(png, dpi=20)
        return [png]

    monkeypatch.setattr(style, "save", save)


def _one_gemm_peak_per_process() -> None:
    """A sweep run in this process measures the matmul peak (``run.sweep.gemm_peak``, about 0.3 s of matmuls on
    a CPU) once per device, dtype and intra-op thread count, and later sweeps record a copy of that
    measurement: a real peak in every manifest, measured once instead of in each of the many in-process sweeps.
    ``measure.peak.gemm_peak`` itself is unchanged (test_peak.py), and so is a sweep run as a real process."""
    from cpbench.commands import sweep as run_sweep

    real, measured = run_sweep.gemm_peak, {}

    def once(device, dtype, *args, **kwargs):
        import torch

        key = (str(device), str(dtype), torch.get_num_threads(), args, tuple(sorted(kwargs.items())))
        if key not in measured:
            peak = real(device, dtype, *args, **kwargs)
            if not math.isfinite(peak.get("gemm_tflops", math.nan)):  # a failed measurement is not kept
                return peak
            measured[key] = peak
        return copy.deepcopy(measured[key])

    run_sweep.gemm_peak = once
