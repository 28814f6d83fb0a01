"""Whatever the locale or console encoding (LANG=C without UTF-8 coercion, latin-1, ascii), every file
cpbench writes is UTF-8 and the console degrades (``->`` for ``→``) instead of crashing. Subprocesses:
the locale and PYTHONIOENCODING are read at interpreter start."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpbench.cli.options  # noqa: F401  (registers the cpbench-ascii codec error handler)
from cpbench.report.charts import chart_stems
from cpbench.report.data import prepare
from cpbench.results.store import load_run
from runfactory import make_run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16"]


def _run(*args, io: str, timeout=120, charts: str | None = None) -> subprocess.CompletedProcess:
    """``cpbench ARGS`` under the C locale; ``charts``: draw only these (tests/onlycharts.py)."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
           "PYTHONIOENCODING": io, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cli = ["-m", "cpbench"] if charts is None else [str(ROOT / "tests" / "onlycharts.py")]
    return subprocess.run([sys.executable, *cli, *map(str, args)], capture_output=True,
                          env={**env, "CPBENCH_TEST_CHARTS": charts or ""}, timeout=timeout)


def test_the_console_spells_what_it_cannot_show():
    assert "a → b ≈ c".encode("latin-1", "cpbench-ascii") == b"a -> b ~ c"
    assert "µs ×2 ✓".encode("ascii", "cpbench-ascii") == b"us x2 ?"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("io", ["latin-1", "ascii"])
@pytest.mark.slow
def test_compare_and_report_under_a_non_utf8_locale(tmp_path, io):
    base = make_run(tmp_path / "base", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    new = make_run(tmp_path / "new", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), seed=1)
    c = _run("compare", base, new, io=io)
    assert c.returncode == 0 and b"Traceback" not in c.stderr, c.stderr[-1500:]
    assert f"base `{base}`".encode() in c.stdout
    if io == "latin-1":  # click writes UTF-8 bytes itself to an ascii console; latin-1 goes through the codec
        assert f"`{base}` -> new".encode() in c.stdout
        return  # report under latin-1: the last lines of the non-ASCII sweep test (same C locale)
    # the charts in place, so report writes report.md alone (charts written under this locale: the sweep below)
    (base / "plots").mkdir()
    for stem, *_ in chart_stems(prepare(load_run(base)[0])):
        (base / "plots" / f"{stem}.png").write_bytes(b"")
    r = _run("report", base, io=io)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-1500:]
    assert (base / "report.md").read_text(encoding="utf-8").startswith("# cpbench: fused vs two-call zigzag CP "
                                                                       "prefill attention — `base`")


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_a_sweep_into_a_non_ascii_directory_under_an_ascii_locale(tmp_path):
    out = tmp_path / "ré"
    p = _run("sweep", "--device", "cpu", "--cp", "2", "--bs", "1", "--seq", "32", *TINY, "--budget-ms", "5", "--timing", "eager",
             "--no-profile", "--out", out, io="ascii", timeout=140, charts="speedup")  # one chart: a non-ASCII path
    assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr[-2000:]
    assert (out / "plots" / "speedup.png").stat().st_size > 1_000 and (out / "plots" / "speedup.svg").exists()
    assert (out / "results.parquet").exists() and len((out / "results.jsonl").read_text(encoding="utf-8")
                                                      .splitlines()) == 4
    assert "`ré`" in (out / "report.md").read_text(encoding="utf-8").splitlines()[0]
    (out / "report.md").unlink()
    again = _run("report", out, io="latin-1")  # the charts are drawn: report.md alone, written under latin-1
    assert again.returncode == 0 and b"Traceback" not in again.stderr, again.stderr[-1500:]
    assert (out / "report.md").read_text(encoding="utf-8").startswith("# cpbench: fused vs two-call zigzag CP "
                                                                      "prefill attention — `ré`")
