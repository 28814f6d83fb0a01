"""The ring all-gather's bus bandwidth, the one formula (nccl-tests' convention): each of ``n`` ranks
receives ``(n - 1) / n`` of the gathered output, so ``busbw = (n - 1) / n * bytes / time``. Measured rows
turn a time into a bandwidth (results.derived); the report turns an assumed bandwidth into a time."""

from __future__ import annotations

import math

from cpbench.errors import CpbenchInputError


def bus_bandwidth_gbps(nbytes: int, world_size: int, us: float) -> float:
    """Ring all-gather bus bandwidth, GB/s (1e9 bytes/s): ``(n - 1) / n * nbytes / time``, with
    ``nbytes`` the gathered output size (ranks.kv_gather.gather_bytes) and ``us`` the time in microseconds."""
    if world_size < 1 or not us > 0:
        raise CpbenchInputError(f"need world_size >= 1 and time > 0 us, got {world_size} and {us}")
    return (world_size - 1) / world_size * nbytes / (us * 1e-6) / 1e9


def ring_time_us(nbytes: float, world_size: float, gbps: float) -> float:
    """The inverse: time (µs) to all-gather ``nbytes`` of output over ``world_size`` ranks at bus bandwidth
    ``gbps`` (GB/s); NaN when ``world_size < 1`` or ``gbps`` is not positive."""
    n = float(world_size)
    if not n >= 1 or not gbps > 0:
        return math.nan
    return (n - 1) / n * float(nbytes) / (gbps * 1e9) * 1e6
