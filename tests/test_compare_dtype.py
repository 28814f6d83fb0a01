"""`compare` pairs rows on the whole key, dtype included: a bf16 run and an fp32 run of the same cells have
nothing in common (exit 2, one line), two bf16 runs pair row for row."""

import pandas as pd
import pytest

from cpbench.results.compare import compare_frames, compare_runs
from cpbench.results.schema import KEY_COLUMNS
from clirun import cpbench
from runfactory import make_rows, write_run

CELLS = dict(cp_sizes=(2,), bss=(1, 4), seqs=(1024, 8192), timings=("eager",), noise=0.0)
N_ROWS = 2 * 2 * 2 * 2  # bs x seq x ranks x modes
NOTHING = "no row ran (status ok) in both runs, so nothing was compared"


def _as(dtype, rows):
    return [{**r, "dtype": dtype} for r in rows]


def test_bf16_and_fp32_runs_do_not_pair(tmp_path):
    rows = make_rows(**CELLS)
    assert len(rows) == N_ROWS and {r["dtype"] for r in rows} == {"bf16"}
    bf16 = write_run(tmp_path / "bf16", rows)
    fp32 = write_run(tmp_path / "fp32", _as("fp32", rows))
    res, _, _ = compare_runs(bf16, fp32)
    assert res.table.empty and res.not_comparable.empty
    assert len(res.only_base) == len(res.only_new) == N_ROWS  # every row is in one run only
    assert set(res.only_base["dtype"]) == {"bf16"} and set(res.only_new["dtype"]) == {"fp32"}
    # the same cell, rank and mode on both sides: only dtype differs
    strip = lambda d: d.drop(columns=["dtype"]).sort_values(list(d.columns.drop("dtype"))).reset_index(drop=True)
    pd.testing.assert_frame_equal(strip(res.only_base), strip(res.only_new))
    for a, b in ((bf16, fp32), (fp32, bf16)):
        r = cpbench("compare", str(a), str(b))
        assert r.returncode == 2, (r.stdout[-500:], r.stderr[-500:])
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and NOTHING in lines[0] and "Traceback" not in r.stderr
        which = ("bf16", "fp32") if a == bf16 else ("fp32", "bf16")
        assert f"dtype: {which[0]} in base, {which[1]} in new" in lines[0]  # the message names the cause
        assert r.stdout == ""  # no markdown for a comparison of nothing


def test_two_bf16_runs_pair_row_for_row(tmp_path):
    rows = make_rows(**CELLS)
    a = write_run(tmp_path / "a", rows)
    b = write_run(tmp_path / "b", rows)
    res, _, _ = compare_runs(a, b)
    assert len(res.table) == N_ROWS and res.only_base.empty and res.only_new.empty and res.not_comparable.empty
    assert set(res.table["dtype"]) == {"bf16"} and (res.table["ratio"] == 1.0).all()
    assert set(res.table["verdict"]) == {"tie"}
    r = cpbench("compare", str(a), str(b))
    assert r.returncode == 0, r.stderr[-1000:]
    assert NOTHING not in r.stderr
    # two fp32 runs pair as well; a mixed pair of frames pairs only the rows whose dtype agrees
    assert len(compare_frames(pd.DataFrame(_as("fp32", rows)), pd.DataFrame(_as("fp32", rows))).table) == N_ROWS
    half = [r if r["bs"] == 1 else {**r, "dtype": "fp32"} for r in rows]
    mixed = compare_frames(pd.DataFrame(rows), pd.DataFrame(half))
    assert len(mixed.table) == N_ROWS // 2 and set(mixed.table["bs"]) == {1}
    assert len(mixed.only_base) == len(mixed.only_new) == N_ROWS // 2


@pytest.mark.slow
def test_real_cpu_sweeps_in_bf16_and_fp32_do_not_pair(tmp_path):
    tiny = ["--backend", "torch", "--cp", "2", "--bs", "1", "--seq", "32", "--no-report", "--layers", "2", "--heads",
            "8", "--kv-heads", "2", "--head-dim", "16", "--page-size", "16", "--budget-ms", "5", "--timing", "eager"]
    for dtype in ("bf16", "fp32"):
        r = cpbench("sweep", *tiny, "--dtype", dtype, "--out", str(tmp_path / dtype))
        assert r.returncode == 0, r.stderr[-2000:]
    res, bman, nman = compare_runs(tmp_path / "bf16", tmp_path / "fp32")
    assert (bman["config"]["dtype"], nman["config"]["dtype"]) == ("bf16", "fp32")
    assert res.table.empty and len(res.only_base) == len(res.only_new) == 4  # 2 ranks x 2 modes
    key = [c for c in KEY_COLUMNS if c != "dtype"]
    assert sorted(map(tuple, res.only_base[key].astype(str).values)) == \
        sorted(map(tuple, res.only_new[key].astype(str).values))
    r = cpbench("compare", str(tmp_path / "bf16"), str(tmp_path / "fp32"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and NOTHING in r.stderr
    same, _, _ = compare_runs(tmp_path / "bf16", tmp_path / "bf16")
    assert len(same.table) == 4 and set(same.table["dtype"]) == {"bf16"}
