"""``--cpu-affinity``: pin the measuring process (each rank of a launch, to its own share) to given CPU
cores, so the host that launches kernels is not moved between cores or shared with other work. Linux
only (``os.sched_setaffinity``)."""

from __future__ import annotations

import os
import re

from cpbench.errors import CpbenchInputError

MAX_CORE = 65535  # no host has more; a longer range would only exhaust memory while expanding it
_DIGITS = re.compile(r"[0-9]+")  # ASCII digits only: "²".isdigit() is True


def parse_cpu_list(text: str) -> list[int]:
    """Cores of a Linux CPU list (the ``taskset -c`` / cpuset syntax): ``"0-3,8,10-11"`` ->
    ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, no duplicates).

    Raises CpbenchInputError on anything else (empty items, reversed ranges, negative numbers).
    """
    cores: set[int] = set()
    for item in text.replace(" ", "").split(","):
        lo, sep, hi = item.partition("-")
        if not _DIGITS.fullmatch(lo) or (sep and not _DIGITS.fullmatch(hi)) or (sep and int(hi) < int(lo)):
            raise CpbenchInputError(f"--cpu-affinity {text!r}: expected a CPU list such as 0-7 or 0-3,8-11 "
                                    f"(bad item {item!r})")
        if int(hi if sep else lo) > MAX_CORE:
            raise CpbenchInputError(f"--cpu-affinity {text!r}: core {int(hi if sep else lo)} is above {MAX_CORE}; "
                                    "give the cores of this machine, e.g. 0-7")
        cores.update(range(int(lo), int(hi if sep else lo) + 1))
    return sorted(cores)


def share_for_rank(cores: list[int], local_rank: int, local_world_size: int) -> list[int]:
    """This rank's contiguous share of ``cores`` when ``local_world_size`` processes of one host split
    them (rank i gets the i-th of equal blocks; the first ``len % n`` ranks get one more core).

    Raises CpbenchInputError when there are fewer cores than processes.
    """
    n = max(1, local_world_size)
    if len(cores) < n:
        raise CpbenchInputError(f"--cpu-affinity gives {len(cores)} core(s) for {n} processes on this host: give "
                                "at least one core per process")
    base, extra = divmod(len(cores), n)
    start = local_rank * base + min(local_rank, extra)
    return cores[start:start + base + (local_rank < extra)]


def pin(text: str, local_rank: int = 0, local_world_size: int = 1) -> list[int]:
    """Pin this process to its share of the cores in ``text`` (:func:`parse_cpu_list`,
    :func:`share_for_rank`); return the cores it now runs on.

    Raises CpbenchInputError for a bad list, a core this process may not use (outside its current
    affinity, e.g. a container's cpuset), or a platform without ``sched_setaffinity``.
    """
    cores = share_for_rank(parse_cpu_list(text), local_rank, local_world_size)
    if not hasattr(os, "sched_setaffinity"):
        raise CpbenchInputError("--cpu-affinity needs Linux (os.sched_setaffinity): drop the option here")
    allowed = os.sched_getaffinity(0)
    outside = [c for c in cores if c not in allowed]
    if outside:
        raise CpbenchInputError(f"--cpu-affinity: core(s) {outside[:8]} are not available to this process "
                                f"(allowed: {_compact(sorted(allowed))}): choose cores from that list")
    os.sched_setaffinity(0, cores)
    return cores


def _compact(cores: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    out, i = [], 0
    while i < len(cores):
        j = i
        while j + 1 < len(cores) and cores[j + 1] == cores[j] + 1:
            j += 1
        out.append(str(cores[i]) if i == j else f"{cores[i]}-{cores[j]}")
        i = j + 1
    return ",".join(out)
