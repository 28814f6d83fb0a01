"""`cpbench compare`'s gate: a row ok in BASE that NEW did not measure fails it (every non-ok status, a
missing row, a median that cannot be a latency), unless --allow-missing; the title and the unmatched-run
message."""

import math

import pandas as pd
import pytest

from cpbench.results.compare import compare_frames, run_difference
from clirun import cpbench
from runfactory import make_rows, make_run, write_run

SMALL = dict(cp_sizes=(2,), bss=(1, 4), seqs=(1024,), timings=("eager",), n_samples=20)
LOST_CELL = dict(bs=4, rank=0, mode="fused")  # one row of the bs-4 cell


def _is_lost(r: dict) -> bool:
    return all(r[k] == v for k, v in LOST_CELL.items())


@pytest.mark.parametrize("status", ["unsupported", "error", "oom", "mismatch", "ineligible"])
def test_every_non_ok_status_in_new_fails_the_gate(tmp_path, status):
    base = make_run(tmp_path / "base", seed=1, **SMALL)
    mark = lambda *a: (status, f"{status} here") if a[4] == 4 and a[6] == 0 and a[7] == "fused" else None
    new = make_run(tmp_path / "new", seed=1, status=mark, **SMALL)
    r = cpbench("compare", base, new)
    assert r.returncode == 1, r.stderr
    failed = status in ("mismatch", "error")  # a failed check or a crash: never excused by --allow-missing
    expected = (f"1 row(s) ok in base failed in new (1 {status}): a correctness mismatch or an error fails the "
                "gate even with --allow-missing" if failed else
                f"1 row(s) ok in base were not measured in new (1 {status}); --allow-missing gates on latency only")
    assert r.stderr.strip() == f"compare: gate failed: {expected}"
    assert "**Gate: FAIL** (exit 1)" in r.stdout
    assert "## Lost in new (1 rows ok in base; these fail the gate)" in r.stdout
    assert f"cp 2 · bs 4 · extend 1024: base ok, new {status} ({status} here)" in r.stdout
    allowed = cpbench("compare", base, new, "--allow-missing")
    assert "only mismatches and errors are gated (--allow-missing)" in allowed.stdout
    if failed:
        assert allowed.returncode == 1 and allowed.stderr.strip() == f"compare: gate failed: {expected}"
    else:
        assert allowed.returncode == 0 and allowed.stderr == "" and "**Gate: pass.**" in allowed.stdout


def test_a_row_missing_from_new_fails_the_gate(tmp_path):
    base = make_run(tmp_path / "base", seed=1, **SMALL)
    new = write_run(tmp_path / "new", [r for r in make_rows(seed=1, **SMALL) if not _is_lost(r)])
    r = cpbench("compare", base, new)
    assert r.returncode == 1 and "(1 missing)" in r.stderr
    assert "cp 2 · bs 4 · extend 1024: base ok, new missing (not in the new run)" in r.stdout
    assert cpbench("compare", base, new, "--allow-missing").returncode == 0


@pytest.mark.parametrize("median", [math.nan, math.inf, -math.inf, -5.0, 0.0])
def test_a_median_that_is_no_latency_is_not_comparable_never_a_tie(median):
    base = pd.DataFrame(make_rows(seed=1, **SMALL))
    rows = make_rows(seed=1, **SMALL)
    for r in rows:
        if _is_lost(r):
            r["latency_us_median"] = median
    res = compare_frames(base, pd.DataFrame(rows))
    assert len(res.table) == 7 and set(res.table["verdict"]) == {"tie"}  # the 7 other rows: same samples
    assert list(res.lost["new_status"]) == ["no latency"] and res.exit_code == 1
    assert res.lost["new_reason"].iloc[0] == f"median latency {median} µs is not a latency"
    assert compare_frames(base, pd.DataFrame(rows), allow_missing=True).exit_code == 0
    # the same value in BASE: not comparable, but nothing was lost
    res = compare_frames(pd.DataFrame(rows), base)
    assert len(res.not_comparable) == 1 and res.lost.empty and res.exit_code == 0


def test_not_ok_in_base_does_not_fail_the_gate(tmp_path):
    oom = lambda *a: ("oom", "out of memory") if a[4] == 4 else None
    base = make_run(tmp_path / "base", seed=1, status=oom, **SMALL)
    new = make_run(tmp_path / "new", seed=1, **SMALL)
    r = cpbench("compare", base, new)
    assert r.returncode == 0 and "## Not comparable (not ok in base)" in r.stdout
    assert "cp 2 · bs 4 · extend 1024: base oom, new ok" in r.stdout


def test_every_row_lost_is_a_gate_failure_not_an_empty_comparison(tmp_path):
    base = make_run(tmp_path / "base", seed=1, **SMALL)
    new = make_run(tmp_path / "new", seed=1, status=lambda *a: ("error", "boom"), **SMALL)
    r = cpbench("compare", base, new)
    assert r.returncode == 1 and "8 row(s) ok in base failed in new (8 error)" in r.stderr
    r = cpbench("compare", base, new, "--allow-missing")  # then nothing at all was compared: bad input
    assert r.returncode == 2 and "nothing was compared" in r.stderr


def test_title_names_base_before_new(tmp_path):
    base = make_run(tmp_path / "base", seed=1, **SMALL)
    new = make_run(tmp_path / "new", seed=2, **SMALL)
    lines = cpbench("compare", base, new).stdout.splitlines()
    assert lines[0] == f"# cpbench compare: base `{base}` → new `{new}`"
    assert lines[2].startswith(f"- base: `{base}`") and lines[3].startswith(f"- new: `{new}`")


def test_a_torch_run_and_an_fa3_run_name_the_backend(tmp_path):
    base = make_run(tmp_path / "torch", backends=("torch",), **SMALL)
    new = make_run(tmp_path / "flashinfer-fa3", backends=("flashinfer-fa3",), **SMALL)
    r = cpbench("compare", base, new)
    assert r.returncode == 2 and "(backend: torch in base, flashinfer-fa3 in new)" in r.stderr
    assert "models" not in r.stderr


def test_run_difference_names_cell_keys_when_the_run_keys_agree():
    a = pd.DataFrame(make_rows(seqs=(1024,), cp_sizes=(2,), bss=(1,), timings=("eager",)))
    b = pd.DataFrame(make_rows(seqs=(2048, 16384), cp_sizes=(2,), bss=(1,), timings=("eager",)))
    assert run_difference(a, b) == "max_extend_len: 1024 in base, 2048, 16384 in new"
    assert run_difference(a, b.iloc[0:0]) == "4 row(s) only in base"


def test_partly_matched_runs_name_the_backend_of_the_unmatched_rows(tmp_path):
    base = make_run(tmp_path / "base", backends=("torch", "flashinfer-fa3"), **SMALL)
    new = make_run(tmp_path / "new", backends=("flashinfer-fa3", "flashinfer-fa2"), **SMALL)
    r = cpbench("compare", base, new, "--allow-missing")
    assert r.returncode == 0, r.stderr
    assert "Unmatched rows differ in backend: torch in base, flashinfer-fa2 in new." in r.stdout
    assert cpbench("compare", base, new).returncode == 1  # the torch rows are not in new


def test_a_cell_skipped_in_both_runs_is_counted_not_listed_as_not_comparable(tmp_path):
    """A cell over --max-prefill-tokens in both runs is no failure: one line counts it, outside the not-comparable
    list (which still names a cell not ok in base); skipped in new only, it is lost, as before."""
    dims = dict(SMALL, seqs=(1024, 2048))
    over = ("skipped", "8192 extend tokens in one batch > --max-prefill-tokens 4096: raise it (0 = no cap)")
    skip = lambda *a: over if a[4] == 4 and a[5] == 2048 else None
    new = make_run(tmp_path / "new", seed=1, status=skip, **dims)
    r = cpbench("compare", make_run(tmp_path / "base", seed=1, status=skip, **dims), new)
    assert r.returncode == 0 and "**Gate: pass.**" in r.stdout, r.stderr
    assert "## Not comparable" not in r.stdout and "base skipped" not in r.stdout
    assert "\n1 cell skipped in both runs (over --max-prefill-tokens): not compared, not a failure.\n" in r.stdout
    oom_or_skip = lambda *a: ("oom", "out of memory") if a[4] == 1 and a[5] == 1024 else skip(*a)
    mixed = cpbench("compare", make_run(tmp_path / "mixed", seed=1, status=oom_or_skip, **dims), new)
    listed = ("## Not comparable (not ok in base)\n\n"
              "- gpt-oss-120b · flashinfer-fa3 · eager · cp 2 · bs 1 · extend 1024: base oom, new ok\n")
    assert listed in mixed.stdout and "base skipped" not in mixed.stdout
    assert mixed.returncode == 0 and "1 cell skipped in both runs" in mixed.stdout
    lost = cpbench("compare", make_run(tmp_path / "ok", seed=1, **dims), new)  # ok in base, skipped in new
    assert lost.returncode == 1 and "4 row(s) ok in base were not measured in new (4 skipped)" in lost.stderr
    assert "cp 2 · bs 4 · extend 2048: base ok, new skipped (8192 extend tokens" in lost.stdout
    assert "skipped in both" not in lost.stdout
    every = make_run(tmp_path / "all-skipped", seed=1, status=lambda *a: over, **dims)
    r = cpbench("compare", every, every)  # the same rows, none of them ran: say so, not "different cells"
    assert r.returncode == 2 and r.stderr.strip() == ("error: no row ran (status ok) in both runs, so nothing was "
                                                      "compared (16 skipped in base): compare runs whose cells ran")
