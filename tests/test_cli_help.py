"""`--help` never cuts a description or an option name, and shows flags without a value."""

import json

import pytest

from clirun import cpbench

COMMANDS = ["geometry", "models", "sweep", "profile", "doctor", "check-backend", "plot", "report", "compare"]


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
    ("doctor", "doctor [OPTIONS]"), ("check-backend", "check-backend [OPTIONS] NAME"), ("plot", "plot [OPTIONS] RUN"),
    ("report", "report [OPTIONS] RUN"),
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


@pytest.mark.parametrize("args, line", [
    (("sweep", "--extend-len", "64", "--extend-len", "32"),
     "error: --extend-len given twice (64, then 32): only one would count; give it once, several values as one "
     "comma-separated list: --extend-len 64,32"),
    (("sweep", "--cp", "2", "--cp=4"),
     "error: --cp given twice (2, then 4): only one would count; give it once, several values as one "
     "comma-separated list: --cp 2,4"),
    (("profile", "--ranks", "0", "--rank", "1"),
     "error: --ranks given twice (--ranks 0, then --rank 1): only one would count; give it once, several values as "
     "one comma-separated list: --ranks 0,1"),
    (("sweep", "--layers", "2", "--layers", "4", "--layers", "8"),
     "error: --layers given 3 times (2, then 4, then 8): only one would count; give it once"),
    (("geometry", "--cp", "2", "--cp", "4"), "error: --cp given twice (2, then 4): only one would count; give it once"),
    # an option that takes one value gets no list hint: `--out a,b` would be one directory named "a,b"
    (("sweep", "--out", "a", "--out", "b"), "error: --out given twice (a, then b): only one would count; give it once"),
    (("sweep", "--model", "llama-3.1-8b", "--model", "gpt-oss-120b"),
     "error: --model given twice (llama-3.1-8b, then gpt-oss-120b): only one would count; give it once"),
    (("profile", "--backend", "torch", "--backend", "flashinfer-fa2"),
     "error: --backend given twice (torch, then flashinfer-fa2): only one would count; give it once"),
    (("sweep", "--backend", "torch", "--backend", "flashinfer-fa2"),
     "error: --backend given twice (torch, then flashinfer-fa2): only one would count; give it once, several values "
     "as one comma-separated list: --backend torch,flashinfer-fa2"),
    (("sweep", "--cp", "2", "--cp", "4", "--cp", "8"),
     "error: --cp given 3 times (2, then 4, then 8): only one would count; give it once, several values as one "
     "comma-separated list: --cp 2,4,8"),
])
def test_a_repeated_single_valued_option_is_refused(tmp_path, args, line):
    """Attack: click keeps the last of a repeated option, so `--extend-len 64 --extend-len 32` measured 32 alone."""
    r = cpbench(*args, "--out", tmp_path / "run") if args[0] != "geometry" and "--out" not in args else cpbench(*args)
    assert r.returncode == 2 and r.stderr.strip() == line, r.stderr
    assert not (tmp_path / "run").exists()


def test_list_options_name_options_their_command_has():
    """options.LIST_OPTIONS names click parameters: a renamed option must not lose its list hint silently."""
    import typer

    from cpbench.cli.app import app
    from cpbench.cli.options import LIST_OPTIONS

    commands = typer.main.get_command(app).commands
    for command, names in LIST_OPTIONS.items():
        params = {p.name for p in commands[command].params}
        assert names <= params, (command, names - params)


def test_a_repeated_flag_or_an_option_s_value_is_no_repeat(tmp_path):
    r = cpbench("geometry", "--cp", "2", "--json", "--json", "--extend-lens", "11,13")
    assert r.returncode == 0, r.stderr
    r = cpbench("sweep", "--cpu-affinity", "--cp", "--cp", "2", "--out", tmp_path / "run")  # the first --cp is a value
    assert r.returncode == 2 and r.stderr.startswith("error: --cpu-affinity '--cp': expected a CPU list"), r.stderr
    assert cpbench("sweep", "--cp", "2", "--cp", "4", "--help").returncode == 0  # --help still shows the help
