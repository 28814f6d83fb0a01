"""Columns derived from every rank's rows of one cell (on the writer, after the rows are collected):
the per-sample critical path, the time fast ranks wait in the all-gather, and the gather's bus
bandwidth. Functions from rows to extra columns, kept apart from the measurement."""

from __future__ import annotations

import numpy as np

from cpbench.results.uncertainty import critical_per_sample
from cpbench.spec.ring import bus_bandwidth_gbps


def add_cell_columns(rows: list[dict]) -> list[dict]:
    """Fill ``critical_us_median``, ``wait_us`` and ``bus_gbps`` on the ``ok`` rows of a torchrun cell
    (rows of other launches are returned unchanged). Rows are grouped by (mode, timing).

    * ``critical_us_median``: the median over samples of the per-sample maximum over ranks (ranks run
      the same agreed sample sequence, so sample i of every rank is the same forward).
    * ``wait_us``: ``gather_us`` minus the smallest ``gather_us`` of the cell: the part of this rank's
      gather spent waiting for slower ranks (µs per forward).
    * ``bus_gbps``: ring all-gather bus bandwidth from ``gather_bytes`` per layer and the fastest
      rank's gather time: ``(n-1)/n * gather_bytes * num_layers / min(gather_us)``.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("launch") == "torchrun" and r.get("status") in ("ok", "mismatch"):
            groups.setdefault((r["mode"], r["timing"]), []).append(r)
    for members in groups.values():
        crit = critical_per_sample([m.get("samples_us") for m in members])
        if crit is not None:
            for m in members:
                m["critical_us_median"] = float(np.median(crit))
        gathers = [m["gather_us"] for m in members if m.get("gather_us") is not None]
        if gathers and len(gathers) == len(members):
            fastest = min(gathers)
            for m in members:
                m["wait_us"] = m["gather_us"] - fastest
                if m.get("gather_bytes") and fastest > 0:
                    m["bus_gbps"] = bus_bandwidth_gbps(m["gather_bytes"] * m["num_layers"], m["cp_size"], fastest)
    return rows
