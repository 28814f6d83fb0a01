"""Charts and report regenerate from the committed real runs (CPU default sweep; H200 fa3 sweep)."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from cpbench.bench.results import critical_path, load_run
from cpbench.plots.charts import render_all
from cpbench.plots.report import write_report

RUNS = Path(__file__).parent.parent / "docs" / "runs"


@pytest.mark.parametrize("name", ["cpu-torch-default", "h200-fa3-gpt-oss-120b"])
def test_report_and_charts_from_committed_run(tmp_path, name):
    run = tmp_path / name
    shutil.copytree(RUNS / name, run, ignore=shutil.ignore_patterns("plots", "report.md"))
    pngs = [p for p in render_all(run) if p.suffix == ".png"]
    assert len(pngs) == 6 and all(p.stat().st_size > 5000 for p in pngs)
    text = write_report(run).read_text()
    df, manifest = load_run(run)
    cp = critical_path(df)
    ok = cp[cp["status"] == "ok"]
    assert len(ok) >= 6
    for _, r in ok.iterrows():  # every critical-path speedup appears in the report, as computed
        assert f"{r['speedup']:.2f}×" in text
    assert manifest["command"] in text
    assert "72" in text and "36" in text  # the per-rank attention kernel counts


def test_h200_run_holds_the_headline_counts():
    df = pd.read_parquet(RUNS / "h200-fa3-gpt-oss-120b" / "results.parquet")
    eager = df[(df["timing"] == "eager") & (df["status"] == "ok")]
    assert set(eager[eager["mode"] == "two-call"]["attn_kernels"]) == {72}
    assert set(eager[eager["mode"] == "fused"]["attn_kernels"]) == {36}
    assert (eager[eager["mode"] == "fused"]["diff_vs_two_call"] == 0).all()
    assert eager["max_abs_err"].max() < 0.02


def test_report_lists_planned_cells_that_were_not_measured():
    text = (RUNS / "h200-fa3-gpt-oss-120b" / "report.md").read_text()
    assert "cp 4 · bs 16 · 16K tokens · eager: **not measured**" in text
    assert "Every cell ran" not in text
