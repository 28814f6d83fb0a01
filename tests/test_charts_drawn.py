"""A chart with nothing of the run to draw is not drawn: the report says which and why. A CPU run timed with
``--timing breakable`` only has no attention counts (they come from the profiled eager forward), and its
overhead chart draws the breakable forward it has."""

from pathlib import Path

import pandas as pd

from cpbench.report import style
from cpbench.report.charts import chart_stems, omitted_charts, render_frame
from cpbench.report.data import prepare
from cpbench.report.overhead import overhead_chart
from cpbench.report.run_report import render_report
from runfactory import make_rows, manifest

CPU = {"device": "cpu", "gpu_name": None}


def breakable_rows(modes=("two-call", "fused")) -> pd.DataFrame:
    """A CPU breakable-only run as the sweep records it: no attention counts, no launch time."""
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(64,), timings=("breakable",), backends=("torch",), noise=0)
    for r in rows:
        r.update(attn_kernels=None, launches=None, host_launch_us=None)
    return pd.DataFrame([r for r in rows if r["mode"] in modes])


def test_a_breakable_only_run_draws_no_empty_kernels_chart_and_says_why(tmp_path):
    d = prepare(breakable_rows())
    assert "kernels" not in [s for s, *_ in chart_stems(d, cpu=True)]
    why = ("attention calls are counted on the profiled eager forward, and this run timed no eager cell "
           "(breakable only)")
    assert omitted_charts(d, cpu=True) == [("kernels", why)]
    paths = render_frame(d, tmp_path, cpu=True)
    assert not (tmp_path / "kernels.png").exists() and (tmp_path / "overhead.png") in paths
    text = render_report(breakable_rows(), manifest(**CPU), "run", plot_dir=tmp_path)
    charts = text.split("## Charts", 1)[1]
    assert f"**kernels** — not drawn: {why}." in charts and "![kernels]" not in charts
    assert f"_No attention call counts: {why}._" in text


def test_the_overhead_chart_draws_the_breakable_forward(tmp_path, monkeypatch):
    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    d = prepare(breakable_rows())
    overhead_chart(d, tmp_path, "overhead", "t", cpu=True)
    labels = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert "forward, breakable (the whole layer)" in labels and "host setup (metadata+page table)" in labels
    ys = {round(float(y), 6) for ax in figs[0].axes for ln in ax.lines for y in ln.get_ydata()}
    slowest = d.groupby("mode")["latency_us_median"].max() / 1e3  # the forward, ms, of each mode's slowest rank
    assert {round(float(v), 6) for v in slowest} <= ys


def test_charts_of_modes_the_run_did_not_measure_are_not_drawn():
    rows = breakable_rows(("two-call",)).assign(timing="eager", attn_kernels=72)
    d = prepare(rows)
    omitted = dict(omitted_charts(d, cpu=True))
    assert omitted == {"speedup": "the run measured two-call only: no fused-vs-two-call effect to draw",
                       "kernels": "the run measured two-call only: its attention calls are set against no other mode's"}
    assert "speedup" not in [s for s, *_ in chart_stems(d, cpu=True)]
    assert "latency" in [s for s, *_ in chart_stems(d, cpu=True)]


def test_a_run_of_both_modes_on_some_ranks_keeps_its_speedup_grid(tmp_path, monkeypatch):
    """Both modes measured on rank 0 of 2 (``--ranks 0``): the grid is drawn and names the ranks measured."""
    from cpbench.report.latency import speedup_heatmap

    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    rows = [r for r in make_rows(cp_sizes=(2,), bss=(1,), seqs=(64,), timings=("graph",)) if r["rank"] == 0]
    d = prepare(pd.DataFrame(rows))
    assert omitted_charts(d) == [] and "speedup" in [s for s, *_ in chart_stems(d)]
    speedup_heatmap(d, tmp_path, "speedup", "t")
    assert [t.get_text() for t in figs[0].axes[0].texts] == ["1/2 ranks"]
