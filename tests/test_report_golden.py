"""report.md of a fixed synthetic run, compared with a committed golden file (tests/fixtures/report_golden.md).

The run is simulated (launch simulated, world size 1), noise-free and fully determined by the arguments
below, so the only volatile parts are the ones the manifest could carry from a machine (dates, absolute
paths, versions); those are normalised before comparing. Any other change to the report's text shows as
a diff.

Regenerate after an intended change to the report, and review the diff of the golden file:

    CPBENCH_UPDATE_GOLDEN=1 PYTHONPATH=$PWD/src MPLBACKEND=Agg python3 -m pytest -q -p no:cacheprovider \
        tests/test_report_golden.py
"""

import difflib
import os
import re
from pathlib import Path

from cpbench.results.store import load_run
from cpbench.report.run_report import render_report
from runfactory import make_rows, write_run

GOLDEN = Path(__file__).parent / "fixtures" / "report_golden.md"
UPDATE = os.environ.get("CPBENCH_UPDATE_GOLDEN") == "1"
VERSION_ROWS = ("torch", "CUDA", "driver", "flashinfer", "Python", "cpbench", "git commit")


def _status(model, backend, timing, cp, bs, seq, rank, mode):
    if cp == 4 and bs == 4 and seq == 8192 and timing == "graph":
        return "oom", "out of memory building or running the cell: CUDA out of memory"
    return None


def golden_run(tmp_path: Path) -> Path:
    """The fixed synthetic run: flashinfer-fa3, gpt-oss-120b, cp 2 and 4, bs 1 and 4, 1K and 8K tokens, eager and graph,
    no noise, one cell out of memory in graph mode."""
    rows = make_rows(cp_sizes=(2, 4), bss=(1, 4), seqs=(1024, 8192), timings=("eager", "graph"), noise=0.0,
                     n_samples=20, status=_status)
    assert {(r["launch"], r["world_size"], r["gather"]) for r in rows} == {("simulated", 1, "none")}
    out = tmp_path / "golden"
    config = {"cp_sizes": [2, 4], "bs_list": [1, 4], "extend_len_list": [1024, 8192], "timings": ["eager", "graph"],
              "modes": ["two-call", "fused"], "backend": "flashinfer-fa3", "dtype": "bf16", "launch": "simulated",
              "world_size": 1}
    return write_run(out, rows, manifest_over={
        "command": f"cpbench sweep --backend flashinfer-fa3 --cp 2,4 --bs 1,4 --seq 1024,8192 --out {out}",
        "created": "2025-01-01T00:00:00Z", "sweep_wall_s": [12.5], "config": config})


def normalise(text: str, tmp_path: Path) -> str:
    """Replace what may differ between machines and days: absolute paths, ISO dates, version rows."""
    text = text.replace(str(tmp_path.resolve()), "<TMP>").replace(str(tmp_path), "<TMP>")
    text = re.sub(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?", "<DATE>", text)
    for label in VERSION_ROWS:
        text = re.sub(rf"^\| {re.escape(label)}( *)\| [^|]*\|$", rf"| {label}\1| <VERSION> |", text, flags=re.M)
    return text


def test_report_matches_golden(tmp_path):
    run = golden_run(tmp_path)
    df, manifest = load_run(run)
    text = normalise(render_report(df, manifest, "golden"), tmp_path)
    if UPDATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert GOLDEN.exists(), f"no golden file: run with CPBENCH_UPDATE_GOLDEN=1 to write {GOLDEN}"
    want = GOLDEN.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "rendered", n=2))
        raise AssertionError(f"report.md differs from {GOLDEN.name} (CPBENCH_UPDATE_GOLDEN=1 regenerates it "
                             f"after an intended change):\n{diff[:6000]}")


def test_golden_is_a_real_report_of_a_simulated_run():
    """The committed golden file holds what the run says (so regenerating it cannot bless an empty report)."""
    text = GOLDEN.read_text()
    assert text.startswith("# cpbench: fused vs two-call zigzag CP prefill attention — `golden`")
    for heading in ("## Summary", "## Environment", "## Reproduce", "## Results per cp size",
                    "## Attention kernels per forward", "## Charts", "## Notes"):
        assert f"\n{heading}\n" in text, heading
    assert "cpbench sweep --backend flashinfer-fa3 --cp 2,4 --bs 1,4 --seq 1024,8192\n" in text  # its --out dropped
    assert "/tmp" not in text and "| created" in text and "<DATE>" in text  # no path of the machine that wrote it
    assert "**oom**" in text and "cp 4 · bs 4 · 8K tokens" in text
    assert "72 → 36" in text  # 36 layers: two calls per layer -> one
    assert "torchrun" not in text and "all-gather" not in text.lower()  # a simulated run: no distributed sections


def test_normalise_only_touches_volatile_parts(tmp_path):
    src = (f"run {tmp_path}/x at 2026-11-29T14:01:02.5+00:00\n| torch | 2.11.0 |\n| GPU | NVIDIA H200 |\n"
           "| cpbench | 0.1.0 |\n1.23 ms")
    assert normalise(src, tmp_path) == ("run <TMP>/x at <DATE>\n| torch | <VERSION> |\n| GPU | NVIDIA H200 |\n"
                                        "| cpbench | <VERSION> |\n1.23 ms")
