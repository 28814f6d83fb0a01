"""--passes: every cell timed again after the whole sweep, the samples folded into the stored row (pass 1's
check and kernel counts kept), resumable between passes; merge_pass on its own."""

import json

import pytest

from cpbench.measure.passes import merge_pass
from clirun import cpbench

ARGS = ["--cp", "2", "--bs", "1,2", "--extend-len", "32", "--layers", "2", "--device", "cpu", "--no-report"]


def _rows(out):
    return {(r["bs"], r["rank"], r["mode"]): r for r in
            (json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines())}


def test_two_passes_fold_their_samples_into_one_row(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", *ARGS, "--passes", "2", "--out", out)
    assert r.returncode == 0, r.stderr
    rows = _rows(out)
    assert len(rows) == 8
    for row in rows.values():
        assert row["passes"] == 2 and len(row["pass_sizes"]) == 2 and all(n >= 3 for n in row["pass_sizes"])
        assert sum(row["pass_sizes"]) == row["n_samples"] == len(row["samples_us"])
        assert row["max_abs_err"] <= 0.02 and row["attn_kernels"] > 0  # pass 1's check and counts stand
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["passes"] == 2
    r = cpbench("sweep", *ARGS, "--passes", "3", "--out", out, "--resume")
    assert r.returncode == 2 and "--passes" in r.stderr  # a resume keeps the pass count


def test_a_later_pass_that_fails_keeps_the_stored_row():
    stored = {"status": "ok", "samples_us": [1.0, 2.0, 3.0], "latency_us_median": 2.0, "n_samples": 3, "x": 1}
    assert merge_pass(stored, {"status": "oom", "reason": "out of memory"}) is stored
    new = {"status": "ok", "samples_us": [4.0, 5.0, 6.0], "x": 9, "stop_reason": "time budget"}
    m = merge_pass(stored, new)
    assert m["samples_us"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and m["pass_sizes"] == [3, 3] and m["passes"] == 2
    assert m["latency_us_median"] == pytest.approx(3.5) and m["n_samples"] == 6 and m["x"] == 1
    assert merge_pass(m, new)["pass_sizes"] == [3, 3, 3]


@pytest.mark.parametrize("bad", ["0", "11"])
def test_a_pass_count_out_of_range_is_one_line(bad):
    r = cpbench("sweep", *ARGS, "--passes", bad)
    assert r.returncode == 2 and "--passes must be an integer in [1, 10]" in r.stderr
