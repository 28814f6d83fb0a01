import os
from pathlib import Path

import pytest
import torch


def _cuda() -> bool:
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The CPU reference runs many small ops: one intra-op thread is faster and far steadier on small CI
# machines, where several threads contend for 2 cores (pytest-xdist runs 2 workers). A CPU sweep run in
# a test keeps that one thread: the runner honours OMP_NUM_THREADS.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


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
