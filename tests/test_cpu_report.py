"""A CPU run is labelled as what it is: a functional check, not a benchmark; CPU words (no GPU, no
kernels, no plan); no speedup headline; no rank imbalance drawn from CPU noise."""

import pandas as pd

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


def test_cpu_report_is_a_functional_check_in_cpu_words(tmp_path):
    text = write_report(write_run(tmp_path / "run", cpu_rows(), manifest_over=CPU)).read_text()
    assert "**A CPU run: a functional check, not a benchmark.**" in text
    assert "fused is faster" not in text and "1.17×" not in text and "speedup [95% CI]" not in text
    assert "imbalance (two-call" not in text
    assert "4 of 4 cells ran on every rank in both modes." in text
    assert "Attention calls per forward, gpt-oss-120b · torch · cp 4: 72 → 36 per rank, 288 → 144 over 4 ranks." in text
    for word in ("GPU", "plan", "kernels (GPU executions)", "| compute capability"):
        assert word not in text.replace("a CPU runs no GPU kernels", ""), word
    assert (tmp_path / "run" / "plots" / "balance.png").exists()


def test_cpu_charts_say_cpu_and_draw_no_imbalance(tmp_path):
    d = prepare(pd.DataFrame(cpu_rows()))
    captions = {stem: caption for stem, _, _, caption in chart_stems(d, cpu=True)}
    assert [s for s, *_ in CHARTS if s not in ("throughput", "setup_memory")] == list(captions)  # no peak, no allocator
    assert "functional check" in captions["latency"] and "not a speedup" in captions["speedup"]
    assert "Attention calls" in captions["kernels"] and "Not drawn on a CPU" in captions["balance"]
    assert not any("GPU executions" in c or "plan" in c for c in captions.values())
    paths = render_frame(d, tmp_path, cpu=True)
    balance = (tmp_path / "balance.svg").read_text()
    assert "not drawn on CPU" in balance and "imbalance, slowest" not in balance
    assert "attention calls per forward" in (tmp_path / "kernels.svg").read_text()
    assert len(paths) == 2 * len(captions)


def test_gpu_report_keeps_its_speedup_headline(tmp_path):
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), latency=fused_faster, noise=0)
    text = write_report(write_run(tmp_path / "run", rows)).read_text()
    assert "fused is faster in 1 of 1 cell" in text and "functional check" not in text


def test_cpu_summary_says_first_that_it_makes_no_speedup_claim(tmp_path):
    """The CPU note opens the summary, before the latency definition, and a CPU summary defines no speedup; a
    GPU report has no note and defines the speedup."""
    text = write_report(write_run(tmp_path / "run", cpu_rows(), manifest_over=CPU)).read_text()
    summary = text.split("## Summary\n\n", 1)[1].split("\n## ", 1)[0]
    assert summary.startswith("**A CPU run: a functional check, not a benchmark.**")
    assert summary.index("makes no speedup claim") < summary.index("Latency is one whole forward")
    assert "Speedup = two-call / fused" not in summary
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), latency=fused_faster, noise=0)
    gpu = write_report(write_run(tmp_path / "gpu", rows)).read_text().split("## Summary\n\n", 1)[1]
    assert gpu.startswith("Latency is one whole forward") and "makes no speedup claim" not in gpu
    assert "Speedup = two-call / fused" in gpu
