"""The report regenerates from the committed real runs (CPU default sweep; H200 flashinfer-fa3 sweep): the code
reads every kind of committed run, those of FlashInfer's backends under their schema 3 names. What the runs measured (headline counts, a finding, every chart redrawn) is
checked by scripts/check_evidence.py, not here."""

import shutil
from pathlib import Path

import pytest

from cpbench.results.critical_path import critical_path, flag
from cpbench.results.store import load_run
from cpbench.results.verdicts import effect_text, speedup_verdict
from cpbench.report.tables import answer as cell_answer
from cpbench.report.run_report import without_out, render_report, write_report

RUNS = Path(__file__).parent.parent / "docs" / "runs"


@pytest.mark.parametrize("name,per_rank", [
    ("cpu-torch-default", "72 → 36"), ("h200-fa3-gpt-oss-120b", "72 → 36"), ("h200-fa2-gpt-oss-120b", "72 → 36"),
    ("h200-fa3-cp2-cp8", "72 → 36"), ("h200-fa3-llama-3.1-8b", "64 → 32"),  # 2 calls/layer -> 1: 36 or 32 layers
    ("h200x2-fa3-torchrun", "72 → 36"), ("h200x2-fa3-simulated", "72 → 36"),
])
def test_report_from_committed_run(name, per_rank):
    df, manifest = load_run(RUNS / name)
    text = render_report(df, manifest, name)
    cp = critical_path(df)
    ok = cp[cp["status"] == "ok"]
    assert len(ok) >= 6
    cpu = name.startswith("cpu")
    for _, r in ok.iterrows():  # every critical-path speedup appears in the report, as computed (not on CPU)
        assert (effect_text(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]) in text) != cpu
    assert ("a functional check, not a benchmark" in text) == cpu
    assert f"```sh\n{without_out(manifest['command'])}\n```" in text  # the Reproduce line, runnable as pasted
    assert f"{per_rank} per rank" in text  # the attention kernel (torch: call) counts
    assert ("## Real CP (torchrun)" in text) == ("torchrun" in name)


def test_report_lists_planned_cells_that_were_not_measured(tmp_path):
    run = tmp_path / "cut"
    shutil.copytree(RUNS / "h200-fa3-gpt-oss-120b", run, ignore=shutil.ignore_patterns("plots", "report.md"))
    rows = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join(r for r in rows if '"bs": 16, "seq_len": 16384' not in r) + "\n")
    (run / "results.parquet").unlink()
    text = write_report(run, charts=False).read_text()
    assert "cp 4 · bs 16 · 16K tokens · eager: **not measured**" in text
    assert "Every cell ran" not in text
    assert "Every cell ran" in (RUNS / "h200-fa3-gpt-oss-120b" / "report.md").read_text()


@pytest.mark.parametrize("name", ["h200-fa3-cp2-cp8", "h200x2-fa3-torchrun"])
@pytest.mark.slow
def test_a_report_takes_the_critical_path_once(tmp_path, monkeypatch, undrawn_charts, name):
    """Charts, tables and summary of one report share one critical-path view (it bootstraps a CI per cell):
    one computation per report, graph-timing charts and the torchrun sections included (the charts are built
    from the rows, not drawn: undrawn_charts)."""
    import cpbench.report.data as data

    calls = []
    monkeypatch.setattr(data, "critical_path", lambda df: calls.append(len(df)) or critical_path(df))
    run = tmp_path / name
    shutil.copytree(RUNS / name, run, ignore=shutil.ignore_patterns("plots", "report.md"))
    write_report(run)
    assert len(calls) == 1


@pytest.mark.slow
def test_fmha_v2_vs_fa3_report_answers_per_backend_and_marks_host_bound_cells():
    """The committed H200 run of trtllm-fmha-v2 and flashinfer-fa3 on the same cells: the report opens with the per-backend
    answer, and the host-bound eager cell (bs 1 x 2K) carries its mark and GPU-time ratio in every table."""
    df, manifest = load_run(RUNS / "h200-fmha-v2-vs-fa3")
    text = render_report(df, manifest, "h200-fmha-v2-vs-fa3")
    summary = text.split("## Summary\n\n", 1)[1]
    assert summary.startswith("Per backend: does fusing the two zigzag calls pay")
    first = next(ln for ln in summary.splitlines() if ln.startswith("| 4 | 1 | 2K | eager |"))
    # the cell's answer as the critical path gives it (the figures themselves: scripts/check_evidence.py)
    cp = critical_path(df)
    c = cp[(cp["backend"] == "trtllm-fmha-v2") & (cp["timing"] == "eager") & (cp["bs"] == 1)
           & (cp["max_extend_len"] == 2048)].iloc[0]
    assert flag(c["host_bound"]) and speedup_verdict(c["speedup"], c["speedup_ci_low"], c["speedup_ci_high"]) == "faster"
    answer = f"{cell_answer(c)} † (GPU time {effect_text(c['gpu_speedup'])})"
    assert answer in first and first.endswith(" vs flashinfer-fa3) |") and "| trtllm-fmha-v2 (" in first
    fuse = text.split("## When to fuse", 1)[1].split("\n## ", 1)[0]
    assert f"| 1 | {answer} |" in fuse
    assert "72 → 36 per rank, 288 → 144 over 4 ranks" in text


@pytest.mark.parametrize("name,old,new", [("h200-fa3-gpt-oss-120b", "fa3", "flashinfer-fa3"),  # schema 1
                                          ("h200-fa2-gpt-oss-120b", "fa2", "flashinfer-fa2"),
                                          ("h200-forward", "fa3", "flashinfer-fa3")])  # schema 2, with FMHAv2
def test_a_committed_run_of_flashinfer_reads_under_its_new_name(name, old, new):
    """The committed rows say fa2 / fa3 (FlashInfer's, as schema 1 and 2 named them) and are not rewritten: they
    load as flashinfer-fa2 / flashinfer-fa3, and the report names the backend so, and reproduces it so."""
    import pandas as pd

    assert old in set(pd.read_parquet(RUNS / name / "results.parquet")["backend"])  # as committed
    df, manifest = load_run(RUNS / name)
    assert new in set(df["backend"]) and old not in set(df["backend"]) and set(df["schema_version"]) == {3}
    assert new in manifest["config"]["backend"].split(",")
    text = render_report(df, manifest, name, RUNS / name / "plots")
    assert f" · {new} · " in text and f" · {old} · " not in text
    reproduce = text.split("## Reproduce\n\n", 1)[1].split("\n## ", 1)[0]
    assert without_out(manifest["command"]) in reproduce and f"--backend {old}" not in reproduce
    assert f",{old} " not in reproduce and not reproduce.rstrip("`\n").endswith(f",{old}")


def test_the_charts_of_a_run_drawn_before_the_rename_are_still_embedded():
    """h200-forward's charts are stored under the old name (plots/latency_gpt-oss-120b_fa3.png): the report embeds
    them rather than leaving the backend's charts out."""
    df, manifest = load_run(RUNS / "h200-forward")
    text = render_report(df, manifest, "h200-forward", RUNS / "h200-forward" / "plots")
    assert "![latency_gpt-oss-120b_fa3](plots/latency_gpt-oss-120b_fa3.png)" in text
    assert "![latency_gpt-oss-120b_trtllm-fmha-v2](plots/latency_gpt-oss-120b_trtllm-fmha-v2.png)" in text
    assert "flashinfer-fa3.png" not in text
