"""--cpu-affinity: CPU-list parsing, the per-rank split, and pinning (Linux)."""

import os

import pytest

from cpbench.bench.affinity import _compact, parse_cpu_list, pin, share_for_rank
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
