"""Chart legends show what the chart draws: fused's open markers open, what the whiskers are, "log scale" only on
a log axis, and the sim_vs_real chart names its model, backend and device like every other chart."""

import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from cpbench.report import style
from cpbench.report.charts import CHARTS, CPU_CHARTS
from cpbench.report.data import prepare
from cpbench.report.gather import gather_share_chart, sim_vs_real_chart
from cpbench.report.latency import latency_chart
from cpbench.studies.line.chart import line_chart
from cpbench.report.overhead import balance_chart
from runfactory import make_rows


@pytest.fixture
def figs(monkeypatch):
    out = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: out.append(fig) or [])
    return out


def entries(fig) -> dict:
    """``{label: handle}`` of a figure's legends (figure-level and per axes)."""
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return {t.get_text(): h for lg in legends for t, h in zip(lg.get_texts(), lg.legend_handles)}


def is_open(handle) -> bool:
    return to_rgba(handle.get_markerfacecolor()) == to_rgba("white")


def test_the_latency_legend_draws_fused_open_and_says_what_the_whiskers_are(tmp_path, figs):
    d = prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024, 65536), timings=("eager",))))
    latency_chart(d, tmp_path, "latency", "t")
    legend = entries(figs[0])
    assert is_open(legend["fused"]) and not is_open(legend["two-call"])  # as the chart draws them
    assert legend["fused"].get_linestyle() == "--" and legend["fused"].get_marker() == "s"
    assert "whiskers: p10–p90 of the slowest rank" in legend


def test_log_scale_is_said_only_on_a_log_axis(tmp_path, figs):
    wide = prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024, 65536), timings=("eager",))))
    narrow = prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024, 2048), timings=("eager",))))
    latency_chart(wide, tmp_path, "latency", "t")
    latency_chart(narrow, tmp_path, "latency", "t")
    (log,), (linear,) = ([ax for ax in f.axes if ax.get_ylabel()] for f in figs)
    assert log.get_yscale() == "log" and log.get_ylabel() == "latency, slowest rank (ms, log scale)"
    assert linear.get_yscale() == "linear" and linear.get_ylabel() == "latency, slowest rank (ms)"
    captions = [c for *_, c in CHARTS] + [c for *_, c in CPU_CHARTS.values()]
    assert not any("ms, log scale" in c for c in captions)  # a caption cannot know the axis


def test_interval_whiskers_are_named_in_the_legend(tmp_path, figs):
    from pathlib import Path

    from cpbench.studies.breakable.report import forward_chart
    from cpbench.results.store import load_run

    runs = Path(__file__).parent.parent / "docs" / "runs"
    line_chart(prepare(load_run(runs / "h200-flex-line")[0]), tmp_path, "line", "t")
    forward_chart(prepare(load_run(runs / "h200-forward")[0]).query("backend == 'trtllm-fmha-v2'"), tmp_path)
    assert all("whiskers: 95 % interval" in entries(f) for f in figs)


def test_balance_and_gather_share_legends_draw_fused_open(tmp_path, figs):
    from test_plots_dist import dist_rows

    d = prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024, 8192), timings=("graph",))))
    balance_chart(d, tmp_path, "balance", "t")
    gather_share_chart(prepare(pd.DataFrame(dist_rows())), tmp_path, "gather_share", "t")
    balance, gather = (entries(f) for f in figs)
    assert is_open(balance["fused (lines)"]) and not is_open(balance["two-call (lines)"])
    assert is_open(gather["fused"]) and not is_open(gather["two-call"])
    assert "whiskers: p10–p90" in balance and "whiskers: min..max over ranks" in gather


def test_sim_vs_real_names_model_backend_and_device(tmp_path, figs):
    from test_plots_dist import dist_rows, sim_rows

    sim_vs_real_chart(prepare(pd.DataFrame(dist_rows())), prepare(pd.DataFrame(sim_rows())), tmp_path, device="H200")
    assert figs[0]._suptitle.get_text() == ("gpt-oss-120b · flashinfer-fa3 · H200: simulated vs real (torchrun) "
                                            "critical path (eager)")
    legend = entries(figs[0])
    assert is_open(legend["simulated (attention only)"]) and not is_open(legend["real (torchrun, with gather)"])
    assert legend["simulated (attention only)"].get_linestyle() == ":" and "whiskers: p10–p90" in legend
