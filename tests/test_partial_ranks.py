"""A cell measured on some of its ranks only (``--ranks``) is labelled with the ranks it measured and is
never shown as a critical path, a speedup, an imbalance or an all-rank total: the critical-path view,
the report (summary, tables, kernel counts), the heatmap, the sweep table and ``cpbench profile``."""

import json
import math

import pandas as pd
import pytest
import torch
from rich.console import Console

from cpbench.results.critical_path import critical_path, ranks_label
from cpbench.cli.sweep import show_summary
from cpbench.report import latency, style
from cpbench.report.data import cells, prepare
from cpbench.report.run_report import write_report
from clirun import cpbench
from runfactory import make_rows, write_run

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16"]


def _rows(keep_ranks, cp=4):
    rows = make_rows(cp_sizes=(cp,), bss=(1,), seqs=(1024,), timings=("eager",), noise=0)
    return [r for r in rows if r["rank"] in keep_ranks]


@pytest.mark.parametrize("ranks,label", [
    ([0], "rank 0 only (1 of 4)"), ([0, 3], "ranks 0, 3 (2 of 4)"), ([0, 1, 2], "ranks 0–2 (3 of 4)"),
    ([0, 1, 2, 3], "all 4 ranks")])
def test_ranks_label(ranks, label):
    assert ranks_label(ranks, 4) == label


def test_partial_cell_has_no_speedup_or_imbalance():
    cp = critical_path(prepare(pd.DataFrame(_rows({0}))))
    c = cp.iloc[0]
    assert not c["all_ranks"] and c["ranks_label"] == "rank 0 only (1 of 4)" and c["ranks_measured"] == 1
    assert math.isnan(c["speedup"]) and math.isnan(c["imbalance_two_call"]) and math.isnan(c["imbalance_fused"])
    # the slowest measured rank's latencies are kept: default_latency at rank 0, 1 × 1024 tokens, cp 4
    assert c["two_call_us"] == pytest.approx(36 * 2 * 8.0 + 2e-5 * 1024 * 1024 / 4)
    full = critical_path(prepare(pd.DataFrame(_rows({0, 1, 2, 3})))).iloc[0]
    assert full["all_ranks"] and full["ranks_label"] == "all 4 ranks" and math.isfinite(full["speedup"])


def test_report_names_the_measured_ranks_and_claims_no_critical_path(tmp_path):
    text = write_report(write_run(tmp_path / "run", _rows({0})), charts=False).read_text()
    assert "rank 0 only (1 of 4)" in text
    assert "fused is faster" not in text and "fused is not faster" not in text
    assert "1 cell measured on some ranks only (rank 0 only (1 of 4)), so it has no critical path" in text
    table = text.split("### gpt-oss-120b · flashinfer-fa3 · eager · cp 4")[1].split("\n\n")[1]
    head, _, row = table.splitlines()
    assert "ranks measured" in head and "| rank 0 only (1 of 4) |" in row and "— / —" in row  # no imbalance
    # kernel counts: per rank only, no all-rank total
    assert "72 → 36 per rank, measured on rank 0 only (1 of 4) (no all-rank total)." in text
    assert "over 1 ranks" not in text


def test_heatmap_labels_a_partial_cell_with_its_ranks():
    view = cells(prepare(pd.DataFrame(_rows({0, 2}))))
    fig, axes = style.new_figure()
    latency._heat(axes[0, 0], view, latency._norm(view["speedup"].to_numpy(float)))
    assert [t.get_text() for t in axes[0, 0].texts] == ["2/4 ranks"]


def test_sweep_table_of_a_partial_cell():
    console = Console(width=160, record=True)
    show_summary(console, pd.DataFrame(_rows({0})))
    out = console.export_text()
    assert "critical path" not in out.replace("not the critical path", "")
    assert "rank 0 only (1 of 4)" in out and "1.00x" not in out


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_profile_partial_ranks_total_is_not_all_ranks(tmp_path, no_gpu):
    r = cpbench("profile", "--cp", "4", "--ranks", "0", "--seq", "32", "--out", str(tmp_path), *TINY)
    assert r.returncode == 0, r.stderr
    assert "all 4 ranks" not in r.stdout and "sum, rank 0 only (1 of 4)" in r.stdout
    total = json.loads((tmp_path / "profile.json").read_text())["cells"][0]["total"]
    # 2 layers x (2 | 1) calls on rank 0 only: 4 -> 2, not the all-rank 16 -> 8
    assert total == {"two-call": 4, "fused": 2, "ranks": [0], "all_ranks": False,
                     "ranks_label": "rank 0 only (1 of 4)"}


def test_profile_records_an_ineligible_cell_and_goes_on(tmp_path, no_gpu):
    r = cpbench("profile", "--cp", "4,16", "--seq", "16", "--json", "--out", str(tmp_path), *TINY)
    assert r.returncode == 0, r.stderr
    got = {c["cp_size"]: c for c in json.loads(r.stdout)["cells"]}
    assert got[16]["status"] == "ineligible" and "16 extend tokens < 2*cp_size = 32" in got[16]["reason"]
    assert got[4]["status"] == "ok" and got[4]["total"]["two-call"] == 16  # 2 layers x 2 calls x 4 ranks
    # every cell ineligible: nothing could run, exit 2 as sweep does
    r = cpbench("profile", "--cp", "16", "--seq", "16", "--out", str(tmp_path / "b"), *TINY)
    assert r.returncode == 2 and "no cell can run" in r.stderr


def test_cpu_profile_counts_calls_not_kernels(tmp_path, no_gpu):
    r = cpbench("profile", "--cp", "2", "--seq", "32", "--out", str(tmp_path), *TINY)
    assert r.returncode == 0, r.stderr
    assert "two-call calls" in r.stdout and "launches" not in r.stdout.split("on CPU")[0]
    rep = json.loads((tmp_path / "profile.json").read_text())
    row = rep["cells"][0]["per_rank"][0]
    assert rep["counted"] == "calls" and row["attn_calls"] == 4 and row["kernels"] is None and row["launches"] is None


def test_cpu_sweep_table_is_a_functional_check():
    console = Console(width=160, record=True)
    show_summary(console, pd.DataFrame(_rows({0, 1, 2, 3})), cpu=True)
    out = console.export_text()
    assert "fused saves, % of two-call time" in out and "speedup" not in out.split("CPU:")[0]
    assert "CPU: a functional check, not a benchmark" in out


def test_profile_records_an_oom_cell_and_goes_on(tmp_path, no_gpu, monkeypatch):
    from cpbench.commands import profiling

    real = profiling.profile_cell

    def oom_at_64(model, cell, **kw):
        if cell.max_extend_len == 64:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory")
        return real(model, cell, **kw)

    monkeypatch.setattr(profiling, "profile_cell", oom_at_64)
    r = cpbench("profile", "--cp", "2", "--seq", "32,64", "--json", "--out", str(tmp_path), *TINY)
    assert r.returncode == 0, r.stderr
    got = {c["max_extend_len"]: c for c in json.loads(r.stdout)["cells"]}
    assert got[64]["status"] == "oom" and "does not fit in memory" in got[64]["reason"]
    assert got[32]["status"] == "ok" and got[32]["total"]["fused"] == 4  # 2 layers x 1 call x 2 ranks
