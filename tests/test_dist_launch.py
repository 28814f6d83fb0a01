"""The torchrun launch's pure parts: argument rewriting, launch validation, derived columns."""

import statistics

import pytest

from cpbench.bench.derived import add_cell_columns
from cpbench.bench.dist.launch import check_launch, child_argv, torchrun_argv
from cpbench.errors import CpbenchInputError


def test_child_argv_drops_parent_only_options():
    argv = ["sweep", "--launch", "torchrun", "--nproc-per-node=4", "--cp", "2,4", "--out", "r"]
    assert child_argv(argv) == ["sweep", "--cp", "2,4", "--out", "r"]
    assert child_argv(["sweep", "--launch=torchrun", "--nproc-per-node", "2"]) == ["sweep"]
    cmd = torchrun_argv(2, argv)
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[5:] == ["-m", "cpbench", "sweep", "--cp", "2,4", "--out", "r"]


@pytest.mark.parametrize("args, words", [
    ((4, [2], "cuda", 2, "auto", "fa3"), "more than the 2 visible GPU"),
    ((4, [2, 3], "cpu", 0, "auto", "torch"), "--cp 3 does not divide the world size 4"),
    ((2, [2], "cpu", 0, "nccl", "torch"), "nccl needs CUDA"),
    ((2, [2], "cpu", 0, "gloo", "fa3"), "runs on GPUs only"),
    ((0, [2], "cpu", 0, "gloo", "torch"), "must be >= 1"),
])
def test_check_launch_refuses_in_one_line(args, words):
    with pytest.raises(CpbenchInputError) as e:
        check_launch(*args)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_check_launch_accepts_a_valid_launch():
    check_launch(8, [2, 4, 8], "cuda", 8, "auto", "fa3")
    check_launch(4, [2, 4], "cpu", 0, "gloo", "torch")


def _row(rank, mode, samples, gather_us):
    return {"launch": "torchrun", "status": "ok", "mode": mode, "timing": "eager", "rank": rank,
            "samples_us": samples, "gather_us": gather_us, "gather_bytes": 1_000_000, "num_layers": 2,
            "cp_size": 2}


def test_critical_path_is_the_per_sample_maximum_over_ranks():
    rows = [_row(0, "fused", [10.0, 30.0, 20.0], 5.0), _row(1, "fused", [25.0, 12.0, 21.0], 8.0)]
    add_cell_columns(rows)
    # per-sample max: 25, 30, 21 -> median 25 (the max of the medians would be 21)
    assert rows[0]["critical_us_median"] == rows[1]["critical_us_median"] == 25.0
    assert statistics.median([max(a, b) for a, b in zip([10, 30, 20], [25, 12, 21])]) == 25
    assert rows[0]["wait_us"] == 0.0 and rows[1]["wait_us"] == 3.0
    # (n-1)/n * bytes * layers / fastest gather: 0.5 * 2e6 B / 5 µs = 200 GB/s
    assert rows[0]["bus_gbps"] == pytest.approx(200.0)


def test_simulated_rows_get_no_cross_rank_columns():
    rows = [{**_row(0, "fused", [1.0], 1.0), "launch": "simulated"}]
    add_cell_columns(rows)
    assert "critical_us_median" not in rows[0] and "wait_us" not in rows[0]
