"""A CPU run is labelled as what it is: a functional check, not a benchmark; CPU words (no GPU, no
kernels, no plan); no speedup headline; no rank imbalance drawn from CPU noise."""

import re

import numpy as np
import pandas as pd
import pytest

from cpbench.report.charts import CHARTS, chart_stems, render_frame
from cpbench.report.data import on_cpu, prepare
from cpbench.report.run_report import write_report
from runfactory import default_latency, make_rows, write_run

CPU = {"device": "cpu", "gpu_name": None, "compute_capability": None, "driver": None, "cuda": None,
       "flashinfer": None, "command": "cpbench sweep --cp 4 --bs 1,4", "timing_method": "time.perf_counter"}


def fused_faster(*a):
    return default_latency(*a) / (1.17 if a[-1] == "fused" else 1.0)


def cpu_rows():
    rows = make_rows(cp_sizes=(4,), bss=(1, 4), seqs=(32, 64), timings=("eager",), backends=("torch",),
                     latency=fused_faster, noise=0)
    for r in rows:  # what a CPU records: calls, no kernels or launches, no allocator memory
        r.update({k: None for k in r if k.startswith("setup_mem_")})
        r.update(launches=0, other_kernels=0, mem_reason="needs CUDA", forward_mem_bytes=None, peak_mem_bytes=None)
    return rows


def test_on_cpu_reads_the_manifest():
    assert on_cpu({"device": "cpu"}) and on_cpu({"config": {"device": "cpu"}})
    assert not on_cpu({"device": "cuda:0"}) and not on_cpu({})


def test_cpu_report_is_a_functional_check_in_cpu_words(tmp_path, rough_charts):
    text = write_report(write_run(tmp_path / "run", cpu_rows(), manifest_over=CPU)).read_text()
    assert "**A CPU run: a functional check, not a benchmark.**" in text
    assert "fused is faster" not in text and "1.17×" not in text and "speedup [95% CI]" not in text
    assert "imbalance (two-call" not in text
    assert "4 of 4 cells ran on every rank in both modes." in text
    assert "Attention calls per forward, gpt-oss-120b · torch · cp 4: 72 → 36 per rank, 288 → 144 over 4 ranks." in text
    for word in ("GPU", "plan", "kernels (GPU executions)", "| compute capability"):
        assert word not in text.replace("a CPU runs no GPU kernels", ""), word
    assert not (tmp_path / "run" / "plots" / "balance.png").exists() and "balance.png" not in text  # no placeholder


@pytest.mark.slow
def test_cpu_charts_say_cpu_and_draw_no_imbalance(tmp_path):
    d = prepare(pd.DataFrame(cpu_rows()))
    from cpbench.studies import study_reports

    captions = {stem: caption for stem, _, _, caption in chart_stems(d, cpu=True, studies=study_reports())}
    assert "line" not in {stem for stem, *_ in chart_stems(d, cpu=True)}  # the study's chart comes with the study
    # no peak, no allocator, no balance from CPU noise
    assert [s for s, *_ in CHARTS if s not in ("throughput", "setup_memory", "balance")] == list(captions)
    assert "functional check" in captions["latency"] and "no speedup claim" in captions["speedup"]
    assert "Attention calls" in captions["kernels"]
    assert not any("GPU executions" in c or "plan" in c for c in captions.values())
    paths = render_frame(d, tmp_path, cpu=True)
    assert not (tmp_path / "balance.svg").exists()
    assert "attention calls per forward" in (tmp_path / "kernels.svg").read_text()
    assert len(paths) == 2 * len(captions)
    assert "≈" not in (tmp_path / "speedup.svg").read_text()  # no tie mark: a CPU grid makes no verdict


def test_a_gpu_speedup_grid_marks_its_ties(tmp_path, monkeypatch):
    from cpbench.report import style
    from cpbench.report.latency import speedup_heatmap

    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), latency=lambda *a: 1000.0)  # a tie
    speedup_heatmap(prepare(pd.DataFrame(rows)), tmp_path, "speedup", "t")
    speedup_heatmap(prepare(pd.DataFrame(rows)), tmp_path, "speedup", "t", neutral=True)
    labels = [[t.get_text() for ax in f.axes for t in ax.texts] for f in figs]
    # a ratio near 1 is printed as the tables print it (the change in percent); the GPU grid marks the tie
    assert len(labels[0]) == 1 and re.fullmatch(r"[+−]\d\.\d %≈", labels[0][0]) and labels[1] == [labels[0][0][:-1]]


def test_heatmap_colours_no_noise():
    from cpbench.report.latency import heat_shade

    grid = np.array([[0.93, 1.3], [np.nan, 1.04]])
    tie = {(0, 0): False, (0, 1): False, (1, 1): True}
    assert np.array_equal(heat_shade(grid, tie), np.array([[0.93, 1.3], [np.nan, 1.0]]), equal_nan=True)  # tie: neutral
    assert np.array_equal(heat_shade(grid, tie, neutral=True), np.array([[1.0, 1.0], [np.nan, 1.0]]), equal_nan=True)


def test_gpu_report_keeps_its_speedup_headline(tmp_path):
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), latency=fused_faster, noise=0)
    text = write_report(write_run(tmp_path / "run", rows), charts=False).read_text()
    assert "fused is faster in 1 of 1 cell" in text and "functional check" not in text


def test_cpu_summary_says_first_that_it_makes_no_speedup_claim(tmp_path):
    """The CPU note opens the summary, before the latency definition, and a CPU summary defines no speedup; a
    GPU report has no note and defines the speedup."""
    text = write_report(write_run(tmp_path / "run", cpu_rows(), manifest_over=CPU), charts=False).read_text()
    summary = text.split("## Summary\n\n", 1)[1].split("\n## ", 1)[0]
    assert summary.startswith("**A CPU run: a functional check, not a benchmark.**")
    assert summary.index("makes no speedup claim") < summary.index("Latency is one whole forward")
    assert "Speedup = two-call / fused" not in summary
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), latency=fused_faster, noise=0)
    gpu = write_report(write_run(tmp_path / "gpu", rows), charts=False).read_text().split("## Summary\n\n", 1)[1]
    assert gpu.startswith("Per backend: does fusing the two zigzag calls pay") and "makes no speedup claim" not in gpu
    assert "Latency is one whole forward" in gpu
    assert "Speedup = two-call / fused" in gpu


def test_cpu_summary_states_the_reference_check_it_passed(tmp_path):
    """What the functional check checked, in numbers: rows matched, the largest error and the tolerance."""
    rows = cpu_rows()  # 4 cells x 4 ranks x 2 modes, bf16, max_abs_err 1e-3
    rows[0].update(max_abs_err=0.0078, diff_vs_two_call=0.0039)
    rows[1].update(status="mismatch", reason="max |err| 0.05 > tolerance 0.02", max_abs_err=0.05)
    rows[2].update(max_abs_err=None)  # not checked (--no-check): left out
    text = write_report(write_run(tmp_path / "run", rows, manifest_over=CPU), charts=False).read_text()
    assert ("- **Outputs vs the fp32 reference** (bf16): 30 of 31 rank × mode rows matched; max |out − reference| "
            "0.05, fused vs two-call at most 0.0039 (tolerance 0.02).") in text


def test_a_cpu_line_chart_draws_grey_ratios_without_interval(tmp_path, monkeypatch):
    """The committed CPU flex run: its line chart and caption are in CPU words; the same rows drawn as a GPU
    run's carry their intervals (error bars) and mode colours."""
    from pathlib import Path

    from matplotlib.colors import to_hex

    from cpbench.report import style
    from cpbench.studies.line.chart import CPU_GREY, line_chart
    from cpbench.results.store import load_run

    d = prepare(load_run(Path(__file__).parents[1] / "docs" / "runs" / "cpu-flex-line")[0])
    from cpbench.studies import study_reports

    captions = {stem: caption for stem, _, _, caption in chart_stems(d, cpu=True, studies=study_reports())}
    assert "line" not in {stem for stem, *_ in chart_stems(d, cpu=True)}  # the study's chart comes with the study
    assert "no speedup claim" in captions["line"] and "without interval" in captions["line"]
    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    line_chart(d, tmp_path, "line", "t", cpu=True)
    line_chart(d, tmp_path, "line", "t")
    cpu, gpu = ([ax for ax in f.axes if ax.lines] for f in figs)
    assert cpu and all(not ax.containers for ax in cpu)  # no error bars
    assert {to_hex(ln.get_color()) for ax in cpu for ln in ax.lines} == {to_hex(CPU_GREY)}
    assert all(ax.get_ylabel() == "saves, % of two-call time" for ax in cpu)
    assert all(len(ax.containers) == 2 for ax in gpu)  # fused and cp-native, each with its interval
    assert len({to_hex(ln.get_color()) for ax in gpu for ln in ax.lines}) == 3


def test_a_three_mode_cpu_report_does_not_say_both_modes(tmp_path):
    """The committed CPU flex run ran two-call, fused and cp-native: its summary and its notes say all three modes
    ran; a two-mode CPU run keeps "both modes"."""
    import shutil
    from pathlib import Path

    from cpbench.report.run_report import ALL_RAN, ALL_RAN_THREE

    run = tmp_path / "flex"
    shutil.copytree(Path(__file__).parents[1] / "docs" / "runs" / "cpu-flex-line", run,
                    ignore=shutil.ignore_patterns("plots", "report.md"))
    text = write_report(run, charts=False).read_text()
    assert "(cp 4): 2 of 2 cells ran on every rank in all three modes." in text
    assert ALL_RAN_THREE in text and ALL_RAN not in text and "both modes" not in text
    two = write_report(write_run(tmp_path / "two", cpu_rows(), manifest_over=CPU), charts=False).read_text()
    assert "ran on every rank in both modes." in two and ALL_RAN in two and ALL_RAN_THREE not in two


def test_the_cpu_breakable_line_says_when_the_rest_of_the_layer_was_left_out():
    import pandas as pd

    from cpbench.studies.breakable.report import cpu_forward_lines

    rows = pd.DataFrame({"timing": ["breakable"] * 2, "status": ["ok", "ok"], "layer_rest": ["0 us", "0 us"]})
    text = " ".join(cpu_forward_lines(rows))
    assert "2 of 2 rows ran the breakable forward's structure with the rest of every layer left out" in text
    assert "ran the whole forward" not in text
    whole = " ".join(cpu_forward_lines(rows.assign(layer_rest="model")))
    assert "2 of 2 rows ran the whole forward (the rest of every layer around attention)" in whole
