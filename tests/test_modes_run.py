"""A run of some modes only (``--modes two-call``, ``fused``, ``cp-native``, ``fused,cp-native``): the report's summary
and notes name the modes the run measured (never "both modes"), and a cp-native-only run shows its latencies in the
console and the report instead of "No cells in this run"."""

import pandas as pd
import pytest
from rich.console import Console

from cpbench.cli.sweep import show_summary
from cpbench.report.run_report import ALL_RAN, render_report
from runfactory import make_rows, manifest

CPU = {"device": "cpu", "gpu_name": None}


def rows(modes: tuple[str, ...]) -> pd.DataFrame:
    """flex rows of cp 2, bs 1 and 4, 1K tokens in ``modes`` (cp-native: the fused rows, 5 % faster)."""
    base = make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024,), timings=("eager",), backends=("flex",), noise=0)
    native = [{**r, "mode": "cp-native", "latency_us_median": r["latency_us_median"] * 0.95,
               "samples_us": [s * 0.95 for s in r["samples_us"]]} for r in base if r["mode"] == "fused"]
    return pd.DataFrame([r for r in base + native if r["mode"] in modes])


@pytest.mark.parametrize("modes, said", [(("two-call",), "two-call"), (("fused",), "fused"),
                                         (("cp-native",), "cp-native"), (("fused", "cp-native"), "fused and cp-native")])
@pytest.mark.parametrize("over", [CPU, {}], ids=["cpu", "gpu"])
def test_the_summary_names_the_modes_the_run_measured(modes, said, over):
    text = render_report(rows(modes), manifest(**over), "run")
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert f"- **gpt-oss-120b · flex · eager** (cp 2): 2 of 2 cells ran on every rank in {said}." in summary
    assert "both modes" not in text and "No cells in this run" not in text and ALL_RAN not in text
    notes = text.split("## Notes", 1)[1]
    assert f"- The run measured {said} only (`--modes`): no cell has a fused-vs-two-call effect." in notes
    assert "measured only some ranks or modes" not in notes  # no cell lacks a rank


def test_a_run_of_both_modes_still_says_both_modes():
    text = render_report(rows(("two-call", "fused")), manifest(**CPU), "run")
    assert "2 of 2 cells ran on every rank in both modes." in text and ALL_RAN in text


def test_a_cp_native_only_run_shows_its_table_in_the_console_and_the_report():
    df = rows(("cp-native",))
    console = Console(width=160, record=True)
    show_summary(console, df, cpu=True)
    out = console.export_text()
    assert "cp_size 2, flex, eager: cp-native, critical path" in " ".join(out.split())  # the title, unwrapped
    head = next(ln for ln in out.splitlines() if "bs" in ln and "extend" in ln)
    assert "cp-native ms" in head and "two-call ms" not in head and "fused ms" not in head and "saves" not in head
    body = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert [ln.split("│")[1].strip() for ln in body] == ["1", "4"]
    from cpbench.studies import study_reports

    text = render_report(df, manifest(**CPU), "run", studies=study_reports())
    assert "_No result rows._" not in text and "Three points on one kernel family" in text
    table = text.split("## Three points on one kernel family", 1)[1].split("\n\n")[2]
    assert table.splitlines()[0] == "| backend | cp | bs | extend | timing | cp-native ms | page table: fused / cp-native |"
