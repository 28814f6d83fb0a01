"""Console tables never cut a number with "…", at any terminal width: the sweep summary, `cpbench geometry`
and `cpbench profile` wrap headers or switch to one block per record."""

import json
import re

import pandas as pd
import pytest
import torch
from rich.console import Console

from cpbench.cli import geometry as cli_geometry, options as cli_options
from cpbench.cli.sweep import show_summary
from cpbench.cli.tables import Col, print_table, table_width
from clirun import cpbench
from runfactory import make_rows

WIDTHS = [40, 80, 160]


def numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text)


def test_table_width_counts_borders_and_wrapped_headers():
    # columns 'a b' (widest word 1, widest value 3) and 'status' (text, 20 chars, kept >= 12): 1 + (3+3) + (12+3)
    assert table_width([Col("a b"), Col("status", number=False)], [["123", "x" * 20]]) == 22
    assert table_width([Col("a b"), Col("status", number=False)], [["123", "x" * 20]], boxed=False) == 17


@pytest.mark.parametrize("width", WIDTHS)
def test_print_table_keeps_every_value_whole(width):
    cols = [Col("rank"), Col("kv_len_prev"), Col("cu_seqlens_kv_combined")]
    rows = [["0", "[10, 16]", "[0, 10, 26, 45, 72]"], ["1", "[12, 18]", "[0, 12, 30, 48, 74]"]]
    console = Console(width=width, record=True)
    print_table(console, "t", cols, rows)
    out = console.export_text()
    assert "…" not in out
    for r in rows:
        for v in r:
            assert v in out
    assert all(len(line) <= width for line in out.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_summary_never_cuts_a_number(width):
    rows = make_rows(cp_sizes=(4,), bss=(1, 16), seqs=(32, 65536), timings=("eager",), noise=0.02,
                     status=lambda *a: ("ineligible", "request 0 has 32 extend tokens < 2*cp_size = 64")
                     if a[5] == 32 and a[3] == 32 else None)
    console = Console(width=width, record=True)
    show_summary(console, pd.DataFrame(rows))
    out = console.export_text()
    assert "…" not in out
    wide = Console(width=400, record=True)
    show_summary(wide, pd.DataFrame(rows))
    want = [n for n in numbers(wide.export_text()) if "." in n]  # ms, speedups, interval ends
    assert want and all(n in out for n in want)


@pytest.mark.parametrize("width", [40, 80])
def test_geometry_at_narrow_widths(width, monkeypatch):
    console = Console(width=width, record=True)
    monkeypatch.setattr(cli_geometry, "console", console)
    r = cpbench("geometry", "--cp", "4", "--extend-lens", "11,13", "--prefix-lens", "8,14")
    assert r.returncode == 0, r.stderr
    out = console.export_text()
    assert "…" not in out
    for g in json.loads(cpbench("geometry", "--cp", "4", "--extend", "11,13", "--prefix", "8,14", "--json").stdout):
        for key in ("kv_len_prev", "kv_len_next", "cu_seqlens_q_combined", "cu_seqlens_kv_combined"):
            assert key in out and str(g[key]) in out


def test_profile_table_at_40_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    console = Console(width=40, record=True)
    monkeypatch.setattr(cli_options, "console", console)
    r = cpbench("profile", "--cp", "4", "--seq", "32", "--layers", "2", "--heads", "4", "--kv-heads", "1",
                "--head-dim", "16", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = console.export_text()
    assert "…" not in out and "all 4 ranks" in out and "16" in out and "8" in out


def test_columns_command_lists_the_schema(monkeypatch):
    from cpbench.results.schema import COLUMNS

    listed = json.loads(cpbench("columns", "--json").stdout)
    assert [c["name"] for c in listed] == list(COLUMNS)
    assert {c["name"]: c["unit"] for c in listed}["latency_us_median"] == COLUMNS["latency_us_median"].unit
    console = Console(width=80, record=True)
    monkeypatch.setattr(cli_geometry, "console", console)
    assert cpbench("columns").returncode == 0
    out = console.export_text()
    assert "…" not in out and all(name in out for name in COLUMNS)


def test_the_console_marks_a_host_bound_cell_and_prints_ratios_with_their_digits():
    """The report marks bs 1 x 2K eager (host-bound) with †; the sweep's console now does too, and an effect is
    printed as the report prints it (a signed percentage) with an interval that never reads as the other verdict."""
    from pathlib import Path

    from cpbench.results.store import load_run

    df, _ = load_run(Path(__file__).parent.parent / "docs" / "runs" / "h200-fmha-v2-default-a")
    console = Console(width=200, record=True)
    show_summary(console, df)
    out = console.export_text()
    eager = out[out.index("trtllm-fmha-v2, eager"):]  # the forward first, then graph, then eager
    row = next(ln for ln in eager.splitlines() if re.search(r"│\s+1 │\s+2048 │", ln))
    assert re.search(r"\+\d+\.\d % \[\+\d+\.\d, \+\d+\.\d\] †", row) and "faster" in row  # the report's notation
    assert "† host-bound eager cell" in out
    for ln in out.splitlines():  # a verdict of faster / slower never sits beside an interval that reaches 1
        m = re.search(r"([+−-]\d+\.\d+) % \[([+−-][\d.]+), ([+−-][\d.]+)\].*?│ (faster|slower) ", ln)
        if m:
            lo, hi = (float(x.replace("−", "-")) for x in m.group(2, 3))
            assert (lo > 0) if m.group(4) == "faster" else (hi < 0), ln


def test_a_long_status_reason_is_shortened_at_a_word():
    """#49: the summary's status cell cut its reason at 120 characters, mid-word ("... or a sm")."""
    reason = ("about 4.1e+05 TFLOP per forward is too much for the CPU reference (limit 2 TFLOP, "
              "CPBENCH_CPU_TFLOP_LIMIT): use a GPU, or shorter requests: at bs 1 and cp_size 2, --extend-len 12345 "
              "or less fits")
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(10000000,), timings=("eager",),
                     status=lambda *a: ("unsupported", reason))
    console = Console(width=400, record=True)
    show_summary(console, pd.DataFrame(rows))
    cell = next(x for x in console.export_text().splitlines() if "unsupported" in x)
    assert ("unsupported: about 4.1e+05 TFLOP per forward is too much for the CPU reference (limit 2 TFLOP, "
            "CPBENCH_CPU_TFLOP_LIMIT): use a GPU…") in cell, cell


def test_shorten_cuts_at_a_word_and_keeps_short_text():
    from cpbench.errors import shorten

    assert shorten("use a GPU, or a smaller --extend-len", 200) == "use a GPU, or a smaller --extend-len"
    assert shorten("use a GPU, or a smaller --extend-len", 20) == "use a GPU, or a…"
    assert shorten("x" * 50, 10) == "x" * 9 + "…"  # one long word: cut, as nothing else can be
    assert shorten("  two   words ", 80) == "two words"
