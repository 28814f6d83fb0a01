"""--cpu-affinity: CPU-list parsing, the per-rank split, and pinning (Linux)."""

import os

import pytest

from cpbench.measure.affinity import _compact, parse_cpu_list, pin, share_for_rank
from cpbench.errors import CpbenchInputError


def test_cpu_list_syntax():
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("5, 2-3,3") == [2, 3, 5]
    assert _compact([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize("bad", ["", "a", "3-1", "-1", "1,,2", "0-"])
def test_bad_cpu_lists_are_refused_in_one_line(bad):
    with pytest.raises(CpbenchInputError, match="--cpu-affinity") as e:
        parse_cpu_list(bad)
    assert "\n" not in str(e.value)


def test_each_local_rank_gets_its_own_contiguous_share():
    cores = list(range(10))
    shares = [share_for_rank(cores, r, 4) for r in range(4)]
    assert shares == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert share_for_rank(cores, 0, 1) == cores
    with pytest.raises(CpbenchInputError, match="at least one core per process"):
        share_for_rank([0, 1], 0, 3)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux sched_setaffinity")
def test_pin_sets_the_affinity_and_refuses_cores_outside_it():
    before = os.sched_getaffinity(0)
    try:
        core = min(before)
        assert pin(str(core)) == [core] and os.sched_getaffinity(0) == {core}
        os.sched_setaffinity(0, before)
        with pytest.raises(CpbenchInputError, match="not available to this process"):
            pin(str(max(before) + 4096))
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux sched_setaffinity")
def test_sweep_pins_and_records_its_cores(tmp_path):
    import json

    from clirun import cpbench

    core = min(os.sched_getaffinity(0))
    out = tmp_path / "run"
    r = cpbench("sweep", "--backend", "torch", "--device", "cpu", "--cp", "2", "--bs", "1", "--extend-len", "8",
                "--layers", "2", "--timing", "eager", "--no-report", "--no-profile", "--cpu-affinity", str(core),
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cpu_affinity"] == {"requested": str(core), "cores": [core]}
    bad = cpbench("sweep", "--backend", "torch", "--device", "cpu", "--cpu-affinity", "3-1", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and "--cpu-affinity '3-1'" in bad.stderr and not (tmp_path / "b").exists()


def test_an_absurd_core_range_is_refused_before_it_is_expanded():
    with pytest.raises(CpbenchInputError, match="core 99999999999999 is above 65535"):
        parse_cpu_list("0-99999999999999")
