"""The torchrun launch's pure parts: argument rewriting, launch validation, derived columns."""

import math
import signal
import statistics

import pytest

import pandas as pd

from cpbench.results.derived import derive
from cpbench.ranks.launch import (check_launch, child_argv, failure_summary, max_cpu_processes, torchrun_argv,
                                  world_size_from_env)
from cpbench.cli.dist import DistBackend, DistOptions, Launch
from cpbench.errors import CpbenchInputError


def test_child_argv_drops_parent_only_options():
    argv = ["sweep", "--launch", "torchrun", "--nproc-per-node=4", "--cp", "2,4", "--out", "r"]
    assert child_argv(argv) == ["sweep", "--cp", "2,4", "--out", "r"]
    assert child_argv(["sweep", "--launch=torchrun", "--nproc-per-node", "2"]) == ["sweep"]
    cmd = torchrun_argv(2, argv)
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[5:] == ["-m", "cpbench", "sweep", "--cp", "2,4", "--out", "r"]


@pytest.mark.parametrize("args, words", [
    ((4, [2], "cuda", 2, "auto", "flashinfer-fa3"), "more than the 2 visible GPU"),
    ((4, [2, 3], "cpu", 0, "auto", "torch"), "--cp 3 does not divide the world size 4"),
    ((2, [2], "cpu", 0, "nccl", "torch"), "nccl needs CUDA"),
    ((2, [2], "cpu", 0, "gloo", "flashinfer-fa3"), "runs on GPUs only"),
    ((0, [2], "cpu", 0, "gloo", "torch"), "must be >= 1"),
])
def test_check_launch_refuses_in_one_line(args, words):
    with pytest.raises(CpbenchInputError) as e:
        check_launch(*args)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_check_launch_accepts_a_valid_launch():
    check_launch(8, [2, 4, 8], "cuda", 8, "auto", "flashinfer-fa3")
    check_launch(4, [2, 4], "cpu", 0, "gloo", "torch")


def _row(rank, mode, samples, gather_us):
    return {"launch": "torchrun", "status": "ok", "mode": mode, "timing": "eager", "rank": rank,
            "samples_us": samples, "gather_us": gather_us, "gather_bytes": 1_000_000, "num_layers": 2,
            "cp_size": 2}


def test_critical_path_is_the_per_sample_maximum_over_ranks():
    rows = derive(pd.DataFrame([_row(0, "fused", [10.0, 30.0, 20.0], 5.0),
                                _row(1, "fused", [25.0, 12.0, 21.0], 8.0)])).to_dict("records")
    # per-sample max: 25, 30, 21 -> median 25 (the max of the medians would be 21)
    assert rows[0]["critical_us_median"] == rows[1]["critical_us_median"] == 25.0
    assert statistics.median([max(a, b) for a, b in zip([10, 30, 20], [25, 12, 21])]) == 25
    assert rows[0]["wait_us"] == 0.0 and rows[1]["wait_us"] == 3.0
    # (n-1)/n * bytes * layers / fastest gather: 0.5 * 2e6 B / 5 µs = 200 GB/s
    assert rows[0]["bus_gbps"] == pytest.approx(200.0)


def test_simulated_rows_get_no_cross_rank_columns():
    rows = derive(pd.DataFrame([{**_row(0, "fused", [1.0], 1.0), "launch": "simulated"}])).to_dict("records")
    assert math.isnan(rows[0]["critical_us_median"]) and math.isnan(rows[0]["wait_us"])


def test_cells_of_other_modes_and_batches_do_not_share_a_critical_path():
    rows = [_row(0, "fused", [10.0, 30.0, 20.0], 5.0), _row(1, "fused", [25.0, 12.0, 21.0], 8.0),
            _row(0, "two-call", [40.0, 41.0, 42.0], 1.0), _row(1, "two-call", [50.0, 51.0, 52.0], 2.0),
            {**_row(0, "fused", [7.0, 7.0, 7.0], 1.0), "bs": 4}, {**_row(1, "fused", [9.0, 9.0, 9.0], 1.0), "bs": 4}]
    rows = derive(pd.DataFrame([{"bs": 1, **r} for r in rows])).to_dict("records")
    assert [r["critical_us_median"] for r in rows] == [25.0, 25.0, 51.0, 51.0, 9.0, 9.0]
    assert [r["wait_us"] for r in rows] == [0.0, 3.0, 0.0, 1.0, 0.0, 0.0]


TORCHRUN_FAILURE = """[2026-11-30 21:40:01] torch.distributed.elastic.multiprocessing.api: failed (exitcode: 3)
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_21:40:01
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 4242)
  error_file: <N/A>
============================================================
"""


def test_failure_summary_names_the_rank_its_exit_code_and_its_error():
    assert failure_summary(TORCHRUN_FAILURE, 1) == "rank 1 exited with code 3"
    raised = "RuntimeError: injected fault on rank 1 (CPBENCH_INJECT_FAULT)\n" + TORCHRUN_FAILURE
    assert failure_summary(raised, 1) == "rank 1 exited with code 3 (RuntimeError: injected fault on rank 1 (CPBENCH_INJECT_FAULT))"
    assert failure_summary("", 1) == "a rank of the torchrun launch failed (torchrun exit 1)"


def test_cpu_launch_size_and_timeouts_are_bounded():
    with pytest.raises(CpbenchInputError, match="too many processes for a CPU launch"):
        check_launch(max_cpu_processes() + 1, [1], "cpu", 0, "gloo", "torch")
    check_launch(8, [2, 4, 8], "cpu", 0, "gloo", "torch")  # 8 processes always fit (the committed gloo run)
    for bad in (0.001, 1e300, float("nan")):
        with pytest.raises(CpbenchInputError, match="--dist-timeout must be 5 to 86400 s"):
            DistOptions(Launch.torchrun, 2, None, DistBackend.auto, bad).check(None)


def test_world_size_must_be_a_count(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(CpbenchInputError, match="WORLD_SIZE='two' is not a process count"):
        world_size_from_env()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(CpbenchInputError, match="--cp 3 does not divide the launch's world size 4"):
        DistOptions(Launch.simulated, None, None, DistBackend.auto, 60).check(None, [2, 3])


def test_failure_summary_reads_the_error_behind_torchruns_rank_prefix():
    """torchrun prints a rank's lines as "[rank0]: ..."; the error that names the failing rank is behind it
    (a profile launch whose rank 1 ran out of memory: rank 0 raised the agreed status)."""
    stderr = ("[rank0]: Traceback (most recent call last):\n"
              "[rank0]: RuntimeError: cp2 bs1 extend40 rank 0 two-call: oom: rank 1: out of memory (injected oom)\n"
              + TORCHRUN_FAILURE.replace("rank      : 1", "rank      : 0"))
    assert failure_summary(stderr, 1).endswith("(RuntimeError: cp2 bs1 extend40 rank 0 two-call: oom: rank 1: out of "
                                               "memory (injected oom))")


def test_sigterm_to_the_launcher_is_passed_on_to_torchrun(tmp_path):
    """The launcher's wait loop with a stand-in for torchrun (a child that exits 7 on SIGTERM): a SIGTERM
    this process gets is sent on to the child, and the wait returns the signal (no torch, no ranks)."""
    import subprocess
    import sys

    code = (
        "import os, signal, subprocess, sys, threading\n"
        "from pathlib import Path\n"
        "from cpbench.ranks.launch import _wait_watching\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, sys, time\\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\\nprint(1, flush=True)\\ntime.sleep(60)'],"
        " stdout=subprocess.PIPE, text=True)\n"
        "child.stdout.readline()\n"
        "threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()\n"
        f"got, stuck = _wait_watching(child, Path({str(tmp_path)!r}))\n"
        "print(got, repr(stuck), child.returncode)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == [str(int(signal.SIGTERM)), "''", "7"]
