"""`cpbench compare`: verdicts, CI, exit codes and unmatched rows, on synthetic runs with known differences."""

import re

import numpy as np
import pandas as pd
import pytest

from cpbench.results.compare import compare_frames, compare_runs, ratio_ci
from cpbench.results.verdicts import ratio_verdict
from cpbench.errors import CpbenchInputError
from clirun import cpbench
from runfactory import default_latency, make_rows, make_run, write_run

SMALL = dict(cp_sizes=(4,), bss=(1, 4), seqs=(1024, 8192), timings=("eager", "graph"))
N_ROWS = 2 * 2 * 2 * 4 * 2  # bs x seq x timing x rank x mode


def scaled(f):
    return lambda *a: f * default_latency(*a)


@pytest.fixture
def base(tmp_path):
    return make_run(tmp_path / "base", seed=1, **SMALL)


def test_new_20pct_faster(tmp_path, base):
    new = make_run(tmp_path / "new", seed=2, latency=scaled(0.8), fmt="jsonl", **SMALL)  # jsonl vs parquet keys
    res, _, _ = compare_runs(base, new)
    t = res.table
    assert len(t) == N_ROWS and set(t["verdict"]) == {"faster"} and res.exit_code == 0
    assert np.allclose(t["ratio"], 0.8, atol=0.01)
    assert ((t["ci_low"] <= t["ratio"]) & (t["ratio"] <= t["ci_high"]) & (t["ci_high"] < 0.83)
            & (t["ci_high"] - t["ci_low"] < 0.03)).all()
    r = cpbench("compare", base, new)
    assert r.returncode == 0, r.stderr
    assert f"{N_ROWS} rows compared: {N_ROWS} faster, 0 slower, 0 tie" in r.stdout


def test_new_20pct_slower_fails(tmp_path, base):
    new = make_run(tmp_path / "new", seed=2, latency=scaled(1.2), **SMALL)
    res, _, _ = compare_runs(base, new)
    assert set(res.table["verdict"]) == {"slower"} and len(res.regressions) == N_ROWS and res.exit_code == 1
    out = tmp_path / "cmp.md"
    r = cpbench("compare", base, new, "--out", out)
    assert r.returncode == 1, r.stderr
    md = out.read_text()
    assert md == r.stdout and "## Regressions" in md and "⚠ regression" in md and "−20.0 % [" in md  # costs 20 %


def test_equal_within_noise_is_a_tie(tmp_path, base):
    new = make_run(tmp_path / "new", seed=7, **SMALL)
    res, _, _ = compare_runs(base, new)
    t = res.table
    # a 95 % interval excludes 1 by chance in about 1 row of 20; those rows differ by well under 1 %
    assert (t["verdict"] == "tie").sum() >= 0.9 * N_ROWS and res.exit_code == 0
    assert (abs(t.loc[t["verdict"] != "tie", "ratio"] - 1) < 0.01).all()
    assert cpbench("compare", base, new).returncode == 0


def test_verdict_and_fail_above_are_separate(tmp_path):
    base = make_run(tmp_path / "b", seed=1, noise=0.002, **SMALL)
    new = make_run(tmp_path / "n", seed=2, noise=0.002, latency=scaled(1.04), **SMALL)
    res, _, _ = compare_runs(base, new, fail_above=0.05)
    assert set(res.table["verdict"]) == {"slower"} and res.exit_code == 0  # slower, but under the gate
    res, _, _ = compare_runs(base, new, fail_above=0.02)
    assert res.exit_code == 1


def test_wide_ci_is_a_tie_and_not_a_regression():
    base = pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), noise=0.6,
                                  n_samples=6, seed=1))
    new = pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), noise=0.6,
                                 n_samples=6, seed=2, latency=scaled(1.1)))
    res = compare_frames(base, new)
    straddle = (res.table["ci_low"] <= 1) & (res.table["ci_high"] >= 1)
    assert straddle.any()
    assert (res.table.loc[straddle, "verdict"] == "tie").all()
    assert not res.table.loc[straddle, "regression"].any()


def test_ratio_ci_and_verdict_units():
    rng = np.random.default_rng(0)
    b = 100 * (1 + 0.01 * rng.standard_normal(200))
    n = 200 * (1 + 0.01 * rng.standard_normal(200))
    lo, hi = ratio_ci(b, n, seed=3)
    assert 1.97 < lo < 2.0 < hi < 2.03
    assert (lo, hi) == ratio_ci(b, n, seed=3)  # fixed seed: reproducible
    assert np.isnan(ratio_ci(b[:1], n)[0])
    assert ratio_verdict(0.9, 0.85, 0.95) == "faster"
    assert ratio_verdict(1.1, 1.05, 1.15) == "slower"
    assert ratio_verdict(1.02, 1.01, 1.03) == "slower"  # the CI lies above 1: no band around a known CI
    assert ratio_verdict(1.01) == "tie"  # no CI: within the ±2 % tie band
    assert ratio_verdict(1.2, 0.9, 1.5) == "tie"  # CI contains 1


def test_missing_samples_fall_back_to_row_ci():
    rows_b = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), noise=0)
    rows_n = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), noise=0, latency=scaled(1.2))
    for r in rows_b + rows_n:
        r["samples_us"] = None
    res = compare_frames(pd.DataFrame(rows_b), pd.DataFrame(rows_n))
    t = res.table
    assert np.allclose(t["ratio"], 1.2) and np.allclose(t["ci_low"], 1.2 * 0.995 / 1.005)
    assert set(t["verdict"]) == {"slower"} and res.exit_code == 1


def test_unmatched_and_not_comparable_rows(tmp_path):
    base = make_run(tmp_path / "b", cp_sizes=(2, 4), bss=(1,), seqs=(1024,), timings=("eager",))
    oom = lambda *a: ("oom", "CUDA out of memory") if a[3] == 4 and a[6] == 0 else None
    new = make_run(tmp_path / "n", cp_sizes=(4,), bss=(1,), seqs=(1024, 2048), timings=("eager",), status=oom)
    res, _, _ = compare_runs(base, new)
    assert len(res.table) == 6  # cp 4, 1024: ranks 1-3 x 2 modes
    assert len(res.only_base) == 4 and set(res.only_base["cp_size"]) == {2}
    assert len(res.only_new) == 8 and set(res.only_new["max_extend_len"]) == {2048}
    assert len(res.not_comparable) == 2 and set(res.not_comparable["new_status"]) == {"oom"}
    assert len(res.lost) == 6 and res.exit_code == 1  # 4 rows gone (cp 2) + 2 oom: the gate fails
    r = cpbench("compare", base, new)
    assert r.returncode == 1, r.stderr
    assert "## Only in base (4 rows)" in r.stdout and "cp 2 · bs 1 · extend 1024" in r.stdout
    assert "## Only in new (8 rows)" in r.stdout and "extend 2048" in r.stdout
    assert "base ok, new oom (CUDA out of memory)" in r.stdout
    assert r.stderr.strip() == ("compare: gate failed: 6 row(s) ok in base were not measured in new (4 missing, "
                                "2 oom); --allow-missing gates on latency only")
    assert cpbench("compare", base, new, "--allow-missing").returncode == 0


def test_negative_fail_above_rejected():
    df = pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(64,), timings=("eager",)))
    with pytest.raises(CpbenchInputError):
        compare_frames(df, df, fail_above=-0.1)


@pytest.mark.parametrize("setup", ["missing", "no_results", "schema", "fail_above"])
def test_bad_input_exits_2_with_one_line(tmp_path, base, setup):
    other = tmp_path / "other"
    extra = []
    if setup == "no_results":
        other.mkdir()
    elif setup == "schema":
        rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
        write_run(other, [{**r, "schema_version": 2} for r in rows], manifest_over={"schema_version": 2})
    elif setup == "fail_above":
        other, extra = base, ["--fail-above", "-1"]
    r = cpbench("compare", base, other, *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in r.stderr


def test_ok_rows_without_latency_are_not_compared():
    import pandas as pd

    from cpbench.results.compare import compare_frames
    from cpbench.results.schema import KEY_COLUMNS

    key = {c: 1 for c in KEY_COLUMNS} | {"model": "m", "backend": "torch", "timing": "eager", "mode": "fused",
                                         "extend_lens": "64", "rank": 0}
    base = pd.DataFrame([{**key, "status": "ok", "latency_us_median": 100.0, "samples_us": [99.0, 100.0, 101.0]}])
    new = pd.DataFrame([{**key, "status": "ok", "latency_us_median": 0.0, "samples_us": []}])
    res = compare_frames(base, new)
    assert res.table.empty and len(res.not_comparable) == 1
    assert res.not_comparable["new_status"].iloc[0] == "no latency" and res.exit_code == 1
    assert compare_frames(base, new, allow_missing=True).exit_code == 0


def test_few_samples_are_reported_but_not_gated(tmp_path):
    few = dict(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), n_samples=5)
    base = make_run(tmp_path / "base", seed=1, **few)
    new = make_run(tmp_path / "new", seed=2, latency=scaled(1.3), **few)
    res, _, _ = compare_runs(base, new)
    assert set(res.table["verdict"]) == {"slower"} and res.table["ungated"].all() and res.exit_code == 0
    r = cpbench("compare", base, new)
    assert r.returncode == 0, r.stderr
    assert "## Slower but not gated (< 10 samples in a run)" in r.stdout and "Raise `--budget-ms`" in r.stdout
    assert "## Regressions" not in r.stdout and "**Gate: pass.**" in r.stdout
    five = cpbench("compare", base, new, "--min-samples", "5")  # 5 samples suffice now: 8 regressions fail the gate
    assert five.returncode == 1 and "## Regressions" in five.stdout and "8 regression(s) (new costs more than 5.0%)" in five.stdout
    r = cpbench("compare", base, new, "--min-samples", "1")
    assert r.returncode == 2 and "--min-samples must be >= 2" in r.stderr


def test_a_cpu_compare_shows_the_difference_and_no_regression(tmp_path):
    """A CPU run's latencies are not gated: compare shows each row's difference and the CPU note, and no regression
    label, count, section or advice (more samples or --min-samples cannot make a CPU timing a benchmark)."""
    few = dict(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), n_samples=5)
    base = make_run(tmp_path / "base", seed=1, manifest_over={"device": "cpu"}, **few)
    new = make_run(tmp_path / "new", seed=2, latency=scaled(1.3), manifest_over={"device": "cpu"}, **few)
    res, _, _ = compare_runs(base, new, min_samples=5)
    assert res.cpu and set(res.table["verdict"]) == {"slower"} and res.exit_code == 0
    assert not res.table["regression"].any() and not res.table["ungated"].any() and res.latency_flags() == []
    for args in ((), ("--min-samples", "5")):
        r = cpbench("compare", base, new, *args)
        assert r.returncode == 0 and "gate failed" not in r.stderr, r.stderr
        assert "⚠ CPU run" in r.stdout and ("**Correctness gate: pass.** Latency gate not applied (CPU timings: a "
                                            "functional check, not a benchmark; gate latencies on a GPU).") in r.stdout
        for said in ("regression", "Regressions", "Slower but not gated", "--budget-ms", "Its latency rule flags"):
            assert said not in r.stdout, said
        rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| eager | 4 | 1 | 1024 | 0 |")]
        assert len(rows) == 8 and all(re.search(r"\| −\d+\.\d % \[−[\d.]+, −[\d.]+\] \| \*\*slower\*\* \|$", ln)
                                      for ln in rows), rows  # the difference (new costs ~23 %), its verdict


def test_a_cpu_compare_still_gates_correctness(tmp_path):
    """CPU latencies are not gated, but a row ok in BASE that fails its check in NEW fails the gate (exit 1)."""
    few = dict(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",), n_samples=5)
    base = make_run(tmp_path / "base", seed=1, manifest_over={"device": "cpu"}, **few)
    bad = lambda *a: ("mismatch", "max_abs_err 0.5 > tol") if a[-1] == "fused" else None  # noqa: E731
    new = make_run(tmp_path / "new", seed=2, status=bad, manifest_over={"device": "cpu"}, **few)
    r = cpbench("compare", base, new)
    assert r.returncode == 1, r.stdout[-1500:]
    assert "**Correctness gate: FAIL** (exit 1): 4 row(s) ok in base failed in new (4 mismatch)" in r.stdout
    assert "Latency gate not applied" in r.stdout and r.stderr.startswith("compare: gate failed: 4 row(s) ok")


def test_nothing_in_common_is_an_error_not_a_pass(tmp_path, base):
    other = make_run(tmp_path / "other", models=("llama-3.1-8b",), **SMALL)
    r = cpbench("compare", base, other)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "nothing was compared" in r.stderr and "(model: gpt-oss-120b in base, llama-3.1-8b in new)" in r.stderr


def test_out_never_writes_into_a_run_directory(tmp_path, base):
    link = tmp_path / "link.md"
    link.symlink_to(base / "results.parquet")
    before = (base / "results.parquet").read_bytes()
    for out in (link, base / "compare.md"):
        r = cpbench("compare", base, base, "--out", out)
        assert r.returncode == 2 and "would write into a run directory" in r.stderr, r.stderr
    assert (base / "results.parquet").read_bytes() == before and not (base / "compare.md").exists()


def test_ratio_ci_is_scipys_bootstrap_on_fixed_data():
    """The interval is scipy.stats.bootstrap's percentile CI of median(new) / median(base), samples
    resampled independently, seeded: equal to calling scipy directly with the same generator."""
    from scipy import stats

    from cpbench.results.uncertainty import _RNG_KW  # rng= (scipy >= 1.15) or random_state=

    rng = np.random.default_rng(11)
    b = 100 * (1 + 0.02 * rng.standard_normal(60))
    n = 110 * (1 + 0.02 * rng.standard_normal(45))
    ref = stats.bootstrap((b, n), lambda x, y, axis: np.median(y, axis=axis) / np.median(x, axis=axis),
                          n_resamples=500, vectorized=True, paired=False, confidence_level=0.9,
                          method="percentile", **{_RNG_KW: np.random.default_rng(5)}).confidence_interval
    assert ratio_ci(b, n, n_boot=500, seed=5, level=0.9) == (ref.low, ref.high)
    assert ratio_ci(b, n, n_boot=500, seed=5, level=0.9) == ratio_ci(b, n, n_boot=500, seed=5, level=0.9)
    assert ratio_ci(b, n, n_boot=500, seed=6, level=0.9) != (ref.low, ref.high)  # the seed is used
    constant = np.full(20, 100.0)
    assert ratio_ci(constant, 1.5 * constant) == (1.5, 1.5)  # no spread: a point interval, no warning


def test_clear_changes_keep_their_verdicts_on_fixed_data():
    """Fixed rows: 25% slower is a gated regression, 25% faster is faster, 0.1% apart is a tie (the same
    classification the hand-written bootstrap gave)."""
    one = dict(cp_sizes=(2,), bss=(1, 4), seqs=(1024,), timings=("eager",), n_samples=30, noise=0.02)
    base = pd.DataFrame(make_rows(seed=1, **one))
    for factor, want, regressions in ((1.25, "slower", 8), (0.75, "faster", 0), (1.001, "tie", 0)):
        res = compare_frames(base, pd.DataFrame(make_rows(seed=2, latency=scaled(factor), **one)))
        assert set(res.table["verdict"]) == {want}, (factor, res.table[["ratio", "ci_low", "ci_high"]])
        assert len(res.regressions) == regressions and res.exit_code == (1 if regressions else 0)
        assert ((res.table["ci_low"] <= res.table["ratio"]) & (res.table["ratio"] <= res.table["ci_high"])).all()


def test_a_directory_of_runs_is_refused_naming_its_latest_run(tmp_path):
    """`report runs/` uses the latest run; `compare` never guesses which of two runs was meant: it names
    the argument, how many runs the directory holds, and its latest run."""
    small = dict(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",))
    a = make_run(tmp_path / "runs" / "a", seed=1, **small)
    b = make_run(tmp_path / "runs" / "b", seed=2, **small)
    runs = tmp_path / "runs"
    r = cpbench("compare", runs, a)
    assert r.returncode == 2 and r.stderr.strip() == (f"error: BASE {str(runs)!r} holds 2 runs, not one: pass one run "
                                                      f"directory such as {b} (the latest)"), r.stderr
    r = cpbench("compare", a, runs)
    assert r.returncode == 2 and r.stderr.startswith(f"error: NEW {str(runs)!r} holds 2 runs, not one")
    only = tmp_path / "one"
    make_run(only / "c", seed=3, **small)
    r = cpbench("compare", a, only)
    assert r.returncode == 2 and f"holds 1 run, not results of its own: pass one run directory such as {only / 'c'}" \
        in r.stderr
    assert cpbench("compare", a, b).returncode == 0
