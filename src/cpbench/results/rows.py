"""A results row, typed by the schema and assembled in one place: the key of its cell, the rank, mode and
timing, a status and whatever was measured. Derived columns are not part of a row (results.derived computes
them on read)."""

from __future__ import annotations

from cpbench.domain.modes import Status
from cpbench.results.schema import SCHEMA_VERSION, STATUSES, field_problem


class RowFieldError(ValueError):
    """A row was given a field the results schema does not have, a derived field, or a value of the wrong
    type: a programming error, raised where the field is set."""


class Row(dict):
    """A results row: a ``dict`` whose every field is checked against the results schema
    (``results.schema.COLUMNS``) when it is set, so a misspelt or derived column fails where the row is made,
    not when it is written. Reads, JSON and pandas see a plain dict.

    Raises RowFieldError on an unknown column, a derived column or a value of the wrong JSON type."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()
        self.update(*args, **kwargs)

    def __setitem__(self, name: str, value) -> None:
        problem = field_problem(name, value)
        if problem:
            raise RowFieldError(f"results row: {problem}")
        super().__setitem__(name, value)

    def update(self, *args, **kwargs) -> None:  # dict.update bypasses __setitem__
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, name: str, value=None):
        if name not in self:
            self[name] = value
        return self[name]

    def __reduce__(self):  # pickles (multiprocessing) as a Row of the same fields
        return (Row, (dict(self),))


def make_row(cell_key: dict, *, rank: int, mode: str, timing: str, status: Status | str, reason: str = "",
             measured: dict | None = None) -> Row:
    """One row: ``cell_key`` (the run and cell columns shared by every row of the cell: model, backend,
    dtype, launch, world_size, seed, gather, tp_size, fused_order, then ``CellKey.row_columns()``,
    page_size, num_layers), then ``rank``, ``mode`` (a ``Mode``), ``timing`` (a ``Timing``), the ``measured``
    columns (latencies in µs, bytes, counts; none for a row that did not run) and ``status`` (a ``Status``) /
    ``reason`` last, so a measured value cannot overwrite them. The enums are stored as their plain strings.

    Raises ValueError for a status outside ``schema.STATUSES`` and RowFieldError for a field the schema does
    not have (both programming errors)."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} not in {STATUSES}")
    return Row({"schema_version": SCHEMA_VERSION, **cell_key, "rank": rank, "mode": str(mode),
                "timing": str(timing), **(measured or {}), "status": str(status), "reason": reason})
