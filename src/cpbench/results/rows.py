"""A results row, assembled in one place: the key of its cell, the rank, mode and timing, a status and
whatever was measured. Derived columns are not part of a row (results.derived computes them on read)."""

from __future__ import annotations

from cpbench.results.schema import SCHEMA_VERSION, STATUSES


def make_row(cell_key: dict, *, rank: int, mode: str, timing: str, status: str, reason: str = "",
             measured: dict | None = None) -> dict:
    """One row: ``cell_key`` (the run and cell columns shared by every row of the cell: model, backend,
    dtype, launch, world_size, seed, gather, tp_size, fused_order, cp_size, bs, max_extend_len, prefix_len,
    extend_lens, prefix_lens, batch, page_size, num_layers), then ``rank``, ``mode`` (two-call | fused),
    ``timing`` (eager | graph), the ``measured`` columns (latencies in µs, bytes, counts; none for a
    row that did not run) and ``status`` / ``reason`` last, so a measured value cannot overwrite them.

    Raises ValueError for a status outside ``schema.STATUSES`` (a programming error)."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} not in {STATUSES}")
    return {"schema_version": SCHEMA_VERSION, **cell_key, "rank": rank, "mode": mode, "timing": timing,
            **(measured or {}), "status": status, "reason": reason}
