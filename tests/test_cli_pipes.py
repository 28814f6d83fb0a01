"""A closed stdout (`cpbench ... | head -1`) costs neither the run directory nor the exit code's meaning
(real processes: the pipe must be a real one)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


SRC = str(Path(__file__).resolve().parents[1] / "src")
TINY = "--layers 2 --heads 4 --kv-heads 1 --head-dim 16 --page-size 16 --budget-ms 2 --device cpu"


def piped(args: str, tmp_path: Path, lines: int = 1, charts: str | None = None) -> subprocess.CompletedProcess:
    """``cpbench ARGS | head -n LINES`` in bash; returncode is cpbench's (PIPESTATUS), not head's.
    ``charts``: draw only these (tests/onlycharts.py)."""
    env = {**os.environ, "PYTHONPATH": SRC, "MPLBACKEND": "Agg", "COLUMNS": "80", "CPBENCH_TEST_CHARTS": charts or ""}
    cli = "-m cpbench" if charts is None else str(Path(__file__).parent / "onlycharts.py")
    cmd = f"{sys.executable} {cli} {args} | head -n {lines} >/dev/null; exit ${{PIPESTATUS[0]}}"
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


@pytest.mark.slow
def test_sweep_into_head_writes_the_whole_run_directory(tmp_path):
    """``| head -n 1`` closes stdout after the first line: every later write (progress, tables, the report's
    path) meets a closed pipe, and the run directory is still written whole."""
    out = tmp_path / "run"
    r = piped(f"sweep --cp 2 --bs 1 --seq 32 {TINY} --out {out}", tmp_path, 1, charts="speedup,latency")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    for name in ("manifest.json", "results.jsonl", "results.parquet", "results.csv", "report.md",
                 "plots/speedup.png", "plots/latency.png"):
        assert (out / name).is_file(), name


@pytest.mark.slow
def test_piped_sweep_keeps_the_bad_input_exit_code(tmp_path):
    r = piped(f"sweep --cp 32 --bs 1 --seq 32 {TINY} --out {tmp_path / 'run'}", tmp_path)
    assert r.returncode == 2 and "no cell can run" in r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_profile_json_into_head(tmp_path):
    r = piped(f"profile --cp 2 --seq 32 {TINY.replace('--budget-ms 2 ', '')} --json --out {tmp_path / 'p'}",
              tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert (tmp_path / "p" / "profile.json").is_file()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("closed", [">&-", "2>&-"])
def test_a_closed_standard_stream_is_written_to_devnull(tmp_path, closed):
    """`cpbench geometry >&-` raised AttributeError at start (exit 1): Python sets a closed stdout to None."""
    env = {**os.environ, "PYTHONPATH": SRC}
    cmd = f"'{sys.executable}' -m cpbench geometry --cp 4 {closed}"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=100)
    assert p.returncode == 0, p.stderr[-1000:]
    assert ("kv_len_prev" in p.stdout) == (closed == "2>&-")
