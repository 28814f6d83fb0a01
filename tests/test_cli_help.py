"""`--help` never cuts a description or an option name, and shows flags without a value."""

import json

import pytest

from clirun import cpbench

COMMANDS = ["geometry", "models", "sweep", "profile", "doctor", "plot", "report", "compare"]


@pytest.mark.parametrize("columns", ["40", "80"])
def test_help_is_never_cut(columns):
    top = cpbench("--help", env={"COLUMNS": columns})
    assert top.returncode == 0 and "..." not in top.stdout.replace("[ARGS]...", "") and "…" not in top.stdout
    flat = " ".join(top.stdout.split()).replace("two- call", "two-call")  # wrapped at its hyphen
    assert "Count attention kernels per rank, two-call vs fused (e.g. 72 -> 36 per rank, 288 -> 144 over 4 ranks)" in flat
    for command in COMMANDS:
        r = cpbench(command, "--help", env={"COLUMNS": columns})
        assert r.returncode == 0 and "…" not in r.stdout and "<bool>" not in r.stdout, command


def test_sweep_help_shows_flags_and_aliases():
    flat = " ".join(cpbench("sweep", "--help", env={"COLUMNS": "80"}).stdout.split())
    for text in ("--resume Continue the run", "--check / --no-check", "--extend-len <str>", "--extend-lens <str>",
                 "--prefix-len, --prefix", "--ranks, --rank",
                 "Stop sampling a variant once the 95% CI of its median is within this fraction of the median"):
        assert text in flat, text
    assert "--seq" not in flat  # the old names still read (test_old_option_names_still_read), unlisted


def test_old_option_names_still_read(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "2", "--bs", "1", "--seq", "40", "--layers", "2", "--budget-ms", "2", "--no-report",
                "--no-profile", "--out", str(out))
    assert r.returncode == 0, r.stderr[-500:]
    assert json.loads((out / "manifest.json").read_text())["config"]["extend_len_list"] == [40]
    both = cpbench("sweep", "--extend-len", "40", "--seq", "48", "--out", str(tmp_path / "x"))
    assert both.returncode == 2 and both.stderr.strip() == "error: --seq is the old name of --extend-len: give --extend-len once"
    lens = cpbench("sweep", "--seq-lens", "", "--out", str(tmp_path / "y"))
    assert lens.returncode == 2 and lens.stderr.strip() == "error: --seq-lens is empty: give lengths such as 3000,5000, or leave it out"


@pytest.mark.parametrize("command, usage", [
    ("geometry", "geometry [OPTIONS]"), ("models", "models [OPTIONS]"), ("columns", "columns [OPTIONS]"),
    ("sweep", "sweep [OPTIONS]"), ("profile", "profile [OPTIONS] [TRACE]..."), ("explain", "explain [OPTIONS]"),
    ("doctor", "doctor [OPTIONS]"), ("plot", "plot [OPTIONS] RUN"), ("report", "report [OPTIONS] RUN"),
    ("compare", "compare [OPTIONS] BASE NEW"),
])
def test_usage_line_names_arguments_without_braces(command, usage):
    """typer writes a required argument as ``{RUN}``; cpbench's usage lines read ``... [OPTIONS] RUN``."""
    r = cpbench(command, "--help", env={"COLUMNS": "120"})
    first = r.stdout.splitlines()[0]
    assert r.returncode == 0 and first == f"Usage: cpbench {usage}", first
    assert not any(f"{{{name}}}" in r.stdout for name in ("RUN", "BASE", "NEW", "run", "base", "new"))


def test_usage_error_names_the_argument_without_braces():
    r = cpbench("compare", "runs/a")
    assert r.returncode == 2 and "Missing argument 'NEW'" in r.stderr and "{" not in r.stderr
