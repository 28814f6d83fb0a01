"""`cpbench compare` compares the two runs' fused-vs-two-call speedups per cell with their intervals, and
counts the cells whose verdicts agree; one tie rule for report, heatmap and compare."""

import math
import re

import pandas as pd
import pytest

from cpbench.results.compare_speedup import agreement, agreement_line, speedup_frame
from cpbench.results.verdicts import NO_VERDICT, TIE_BAND, is_tie, ratio_verdict, speedup_verdict
from cpbench.report import tables
from clirun import cpbench
from runfactory import make_rows, make_run, write_run

SMALL = dict(cp_sizes=(4,), bss=(1, 4), seqs=(1024, 8192), timings=("eager", "graph"), n_samples=40,
             noise=0.005)


def speedups(by_cell):
    """Latency model: two-call 1000 µs on every rank, fused 1000 / by_cell(bs, seq) µs."""
    return lambda model, backend, timing, cp, bs, seq, rank, mode: (
        1000.0 if mode == "two-call" else 1000.0 / by_cell(bs, seq))


def test_speedup_verdicts_agree_per_cell(tmp_path):
    base = make_run(tmp_path / "base", seed=1, latency=speedups(lambda bs, seq: 1.2), **SMALL)
    new_sp = lambda bs, seq: 1.2 if bs == 1 else 1.0 if seq == 1024 else 0.8
    new = make_run(tmp_path / "new", seed=2, latency=speedups(new_sp), **SMALL)
    from cpbench.results.store import load_run

    f = speedup_frame(load_run(base)[0], load_run(new)[0])
    assert len(f) == 8 and set(f["base_verdict"]) == {"faster"}
    assert list(f["bs"]) == [1, 1, 4, 4] * 2 and list(f["max_extend_len"]) == [1024, 8192] * 4  # numeric order
    assert ((f["base_ci_low"] < 1.2) & (1.2 < f["base_ci_high"]) & (f["base_ci_low"] > 1.1)).all()
    new_v = dict(zip(zip(f["timing"], f["bs"], f["max_extend_len"]), f["new_verdict"]))
    assert new_v[("eager", 1, 8192)] == "faster" and new_v[("graph", 4, 1024)] == "tie"
    assert new_v[("eager", 4, 8192)] == "slower"
    assert list(f["agree"]) == [True, True, False, False] * 2 and agreement(f) == (4, 8)
    r = cpbench("compare", base, new, "--allow-missing")
    assert "## Fused vs two-call in each run (critical path)" in r.stdout
    assert "**verdicts agree in 4 of 8 cells (50 %); the two intervals overlap in 4 of 8; the new speedup lies " \
           "inside the base interval in " in r.stdout
    assert list(f["overlap"]) == [True, True, False, False] * 2  # 1.2 vs 1.0 and 0.8: disjoint
    row = next(x for x in r.stdout.splitlines() if x.startswith("| graph | 4 | 4 | 8192 |"))
    assert row.endswith("| slower | **no** | **no** |") and "| faster |" in row
    assert re.search(r"\| \+1[67]\.\d % \[", row) and re.search(r"\| −2[4-6]\.\d % \[", row)  # 1.2x and 0.8x


def test_cells_that_did_not_run_are_listed_not_counted(tmp_path):
    base = make_run(tmp_path / "base", seed=1, latency=speedups(lambda bs, seq: 1.2), **SMALL)
    oom = lambda *a: ("oom", "out of memory") if a[4] == 4 else None
    new = make_run(tmp_path / "new", seed=2, latency=speedups(lambda bs, seq: 1.2), status=oom, **SMALL)
    from cpbench.results.store import load_run

    f = speedup_frame(load_run(base)[0], load_run(new)[0])
    assert len(f) == 8 and list(f["new_status"]).count("oom") == 4
    assert set(f.loc[f["new_status"] == "oom", "new_verdict"]) == {NO_VERDICT}
    assert agreement(f) == (4, 4)
    assert agreement_line(f).startswith("verdicts agree in 4 of 4 cells (100 %); the two intervals overlap in 4 of 4; "
                                        "the new speedup lies inside the base interval in ")
    assert agreement_line(f.iloc[0:0]) == "no cell has a speedup verdict in both runs"
    r = cpbench("compare", base, new)
    assert r.returncode == 1  # the lost bs-4 cells fail the gate
    assert any(x.startswith("| eager | 4 | 4 | 1024 |") and x.endswith("| — | oom | — | — |")
               for x in r.stdout.splitlines())


def test_overlap_tells_a_boundary_tie_from_a_contradiction():
    from cpbench.results.compare_speedup import _overlap

    assert _overlap(0.94, 1.00, 0.93, 0.98) is True  # tie vs slower, the same speedup: no contradiction
    assert _overlap(0.82, 1.12, 0.84, 0.88) is True
    assert _overlap(1.01, 1.05, 0.90, 0.99) is False  # faster vs slower: always disjoint
    assert _overlap(0.90, 0.92, 0.95, 0.97) is False  # both slower, yet the speedups differ
    assert _overlap(math.nan, 1.0, 0.9, 1.1) is None  # no interval: not judged


@pytest.mark.parametrize("sp, lo, hi, want", [
    (1.5, 1.2, 1.8, "faster"), (0.7, 0.6, 0.8, "slower"), (1.3, 0.9, 1.6, "tie"),
    (1.01, 1.005, 1.015, "faster"),  # a tight interval above 1: no band around a known interval
    (1.019, math.nan, math.nan, "tie"), (1.021, math.nan, math.nan, "faster"),  # no interval: ±TIE_BAND
    (0.979, math.nan, math.nan, "slower"),
    (math.nan, 0.9, 1.1, NO_VERDICT), (math.inf, 1.2, 1.3, NO_VERDICT), (0.0, math.nan, math.nan, NO_VERDICT),
    (-1.0, math.nan, math.nan, NO_VERDICT)])
def test_one_tie_rule_for_report_heatmap_and_compare(sp, lo, hi, want):
    assert TIE_BAND == 0.02
    assert speedup_verdict(sp, lo, hi) == want
    cell = pd.Series({"speedup": sp, "speedup_ci_low": lo, "speedup_ci_high": hi})
    assert tables.verdict(cell) == want  # the report's tables
    assert is_tie(sp, lo, hi) == (want == "tie")  # the heatmap's "≈"
    # compare's latency ratio is the inverse orientation: new / base < 1 is faster
    inv = lambda x: 1 / x if x and math.isfinite(x) and x > 0 else x
    flip = {"faster": "slower", "slower": "faster"}.get(want, want)
    if sp > 0 and math.isfinite(sp):
        assert ratio_verdict(sp, lo, hi) == flip
        assert ratio_verdict(inv(sp), inv(hi), inv(lo)) == want


def test_compare_frame_side_counts_match_the_report_summary():
    """The speedup verdict compare shows for a run is the one the run's own report counts."""
    from cpbench.results.critical_path import critical_path

    df = pd.DataFrame(make_rows(seed=3, latency=speedups(lambda bs, seq: 1.0 + 0.05 * (bs == 4)), **SMALL))
    view = critical_path(df)
    f = speedup_frame(df, df)
    assert list(f["base_verdict"]) == list(f["new_verdict"])
    assert sorted(f["base_verdict"]) == sorted(view.apply(tables.verdict, axis=1))
    assert agreement(f) == (8, 8)




def test_compare_names_differences_in_cpu_threads_and_token_cap(tmp_path):
    run = lambda name, seed, over: make_run(tmp_path / name, seed=seed, latency=speedups(lambda bs, seq: 1.2),
                                            manifest_over=over, **SMALL)
    base = run("base", 1, {"cpu_threads": 1, "config": {"max_prefill_tokens": 131072}})
    new = run("new", 2, {"cpu_threads": 2, "config": {"max_prefill_tokens": 131072}})
    out = cpbench("compare", base, new).stdout
    assert "- ⚠ different CPU threads (1 vs 2): the runs were not measured alike." in out
    assert "different --max-prefill-tokens" not in out  # the same cap: nothing said
    capped = run("capped", 3, {"cpu_threads": 1, "config": {"max_prefill_tokens": 0}})
    assert "- ⚠ different --max-prefill-tokens (131072 vs 0)" in cpbench("compare", base, capped).stdout


def test_compare_names_options_that_change_every_row(tmp_path):
    """--swa-pool adds a second page table and --context-len widens every table: rows with the same key
    then mean different things, and compare says so (the committed H200 pair with and without the SWA pool)."""
    from pathlib import Path

    runs = Path(__file__).parent.parent / "docs" / "runs"
    out = cpbench("compare", str(runs / "h200-fmha-v2-default-a"), str(runs / "h200-fmha-v2-swa-pool")).stdout
    assert "- ⚠ different --swa-pool (False vs True)" in out
    same = cpbench("compare", str(runs / "h200-fmha-v2-default-a"), str(runs / "h200-fmha-v2-default-b")).stdout
    assert "⚠ different --" not in same


def test_regressions_name_host_bound_rows(tmp_path):
    base_rows = make_rows(latency=speedups(lambda bs, seq: 1.0), seed=1, **SMALL)
    new_rows = make_rows(latency=speedups(lambda bs, seq: 1.0), seed=2, **SMALL)
    for r in new_rows:
        if r["bs"] == 1 and r["mode"] == "two-call" and r["timing"] == "eager":
            r["samples_us"] = [1.2 * x for x in r["samples_us"]]  # the host launched 20 % slower
            r["latency_us_median"] *= 1.2
            # rank 0's eager two-call forward waits for the host: its latency is 1.5x its GPU busy time
            r["gpu_busy_us"] = r["latency_us_median"] / (1.5 if r["rank"] == 0 else 1.0)
    out = cpbench("compare", write_run(tmp_path / "b", base_rows), write_run(tmp_path / "n", new_rows)).stdout
    regress = out[out.index("## Regressions"):out.index("## All rows")]
    rank0 = [x for x in regress.splitlines() if x.startswith("| eager | 4 | 1 |") and "| 0 | two-call |" in x]
    rank1 = [x for x in regress.splitlines() if x.startswith("| eager | 4 | 1 |") and "| 1 | two-call |" in x]
    assert rank0 and all(x.endswith("⚠ regression (host-bound: the launching CPU's time) |") for x in rank0)
    assert rank1 and all(x.endswith("⚠ regression |") for x in rank1)


def test_agreement_says_when_one_run_has_no_interval(tmp_path):
    base_rows = make_rows(latency=speedups(lambda bs, seq: 1.2), seed=1, **SMALL)
    new_rows = make_rows(latency=speedups(lambda bs, seq: 1.2), seed=2, **SMALL)
    for r in new_rows:
        r["samples_us"] = None  # an older run without raw samples: its verdicts use the ±2 % band
    out = cpbench("compare", write_run(tmp_path / "b", base_rows), write_run(tmp_path / "n", new_rows)).stdout
    row = next(x for x in out.splitlines() if x.startswith("| eager | 4 | 1 | 1024 |"))
    assert "| yes (one run has no interval) |" in row
    same = cpbench("compare", write_run(tmp_path / "b2", base_rows), write_run(tmp_path / "n2", base_rows)).stdout
    assert "(one run has no interval)" not in same


@pytest.mark.parametrize("base_over,new_over", [({"device": "cpu"}, {"device": "CPU"}),
                                                ({}, {"config": {"device": "cpu"}})])
def test_cpu_runs_get_no_speedup_verdicts(tmp_path, base_over, new_over):
    """Either run on a CPU (the report's own predicate, ``data.on_cpu``): one line says why the speedups are
    not compared, with no verdicts or agreement counts; the latency rows stay, the latency gate is not applied."""
    fast_then_slow = (lambda bs, seq: 1.2), (lambda bs, seq: 0.8)
    base, new = (make_run(tmp_path / name, seed=seed, latency=speedups(sp), manifest_over=over, **SMALL)
                 for name, seed, sp, over in zip(("base", "new"), (1, 2), fast_then_slow, (base_over, new_over)))
    r = cpbench("compare", base, new)
    assert "## Speedups" not in r.stdout and "verdicts agree" not in r.stdout and "| slower |" not in r.stdout
    assert r.stdout.count("makes no speedup claim") == 1 and "⚠ CPU run" in r.stdout
    # fused 1.5x slower in new: its rows show the difference, with no regression section (CPU latencies are not gated)
    assert "## Regressions" not in r.stdout and "| **slower** |" in r.stdout and r.returncode == 0
    assert "Latency gate not applied (CPU timings" in r.stdout and "gate failed" not in r.stderr
    mixed = "⚠ one run is on a CPU and the other on a GPU: the ratios compare devices, not code." in r.stdout
    assert mixed == (base_over == {})  # the default manifest is a GPU run's


def test_agreement_among_cells_host_bound_in_neither_run():
    """The committed H200 pair of the default sweep (trtllm-fmha-v2): eager bs 1 x 2K is host-bound (its
    two-call latency is the launch rate); the line gives the agreement without it beside the total."""
    from pathlib import Path

    from cpbench.results.store import load_run

    runs = Path(__file__).parent.parent / "docs" / "runs"
    f = speedup_frame(load_run(runs / "h200-fmha-v2-default-a")[0], load_run(runs / "h200-fmha-v2-default-b")[0])
    hb = f[f["base_host_bound"] | f["new_host_bound"]]
    assert [(r.timing, r.bs, r.max_extend_len) for r in hb.itertuples()] == [("eager", 1, 2048)]
    assert agreement(f) == (16, 16) and agreement(f, gpu_bound_only=True) == (15, 15)
    assert agreement_line(f) == ("verdicts agree in 16 of 16 cells (100 %; 15 of 15 not host-bound); "
                                 "the two intervals overlap in 14 of 16; the new speedup lies inside the base "
                                 "interval in 14 of 16 (88 %)")
    every = f.assign(base_host_bound=True)
    assert agreement_line(every).startswith("verdicts agree in 16 of 16 cells (100 %; every cell host-bound)")


def test_compare_marks_the_host_bound_cell():
    from pathlib import Path

    runs = Path(__file__).parent.parent / "docs" / "runs"
    out = cpbench("compare", str(runs / "h200-fmha-v2-default-a"), str(runs / "h200-fmha-v2-default-b")).stdout
    row = next(ln for ln in out.splitlines() if ln.startswith("| eager | 4 | 1 | 2048 | 0 | +48.8 %"))
    # speedups 1.95 [1.92, 1.99] and 1.74 [1.69, 1.80], as the share of the two-call time fused saves
    assert row.startswith("| eager | 4 | 1 | 2048 | 0 | +48.8 % [+47.9, +49.8] † | faster | +42.6 % [+40.9, +44.4] † |")
    assert "† host-bound in that run" in out and out.count(" † |") == 2  # only that cell, in both runs
