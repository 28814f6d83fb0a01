"""Rows a reader leaves out: a hand-edited row whose key column holds a value no sweep writes (a ``mode`` of
``"triple"``, a null ``bs``, ``rank`` 99 of a cp 2 cell, ``cp_size`` 0), or whose value does not fit its schema
column's type (a ``latency_us_median`` of ``"fast"``). Such a row would make every cell look incomplete, invent
a cell ("bs -1") or make the whole run unreadable; it is dropped instead and named, with its file and row, in
one warning. No torch here.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Sequence

from cpbench.domain.modes import ALL_MODES
from cpbench.errors import CpbenchInputError, CpbenchWarning
from cpbench.results.schema import COLUMNS, STATUSES, TIMINGS

if TYPE_CHECKING:
    import pandas as pd

CHOICES = (("mode", ALL_MODES), ("timing", TIMINGS), ("status", STATUSES))  # text key columns: their values
LEAST = (("cp_size", 1), ("bs", 1), ("max_extend_len", 1))  # integer key columns: their smallest value
SHOWN = 10  # rows named in the warning; the rest are counted


def row_problems(df: pd.DataFrame) -> pd.Series:
    """What is wrong with each row, as text (``"bs null (not an integer >= 1)"``), "" for a row without a
    problem (one entry per row of ``df``, its first problem). Checked: ``mode``, ``timing``, ``status`` against
    the schema's values; ``cp_size``, ``bs``, ``max_extend_len`` a finite integer >= 1; ``rank`` an integer in
    ``[0, cp_size)`` (a CP rank); then every stored column of the schema against its type (:func:`misfits`).
    A column ``df`` lacks is not checked (an old run)."""
    import numpy as np
    import pandas as pd

    out = pd.Series("", index=df.index, dtype=object)

    def name(mask: pd.Series, col: str, why) -> None:
        if not mask.any():  # the usual case: the column is clean (no comparison over ``out``)
            return
        for i in mask[mask & (out == "")].index:
            out[i] = f"{col} {_shown(df.at[i, col])} ({why(i) if callable(why) else why})"

    for col, allowed in CHOICES:
        if col in df:
            name(~df[col].isin(allowed), col, f"not {' / '.join(allowed)}")

    def integer(col: str) -> tuple[pd.Series, pd.Series]:  # values as floats, and where they are no integer
        v = pd.to_numeric(df[col], errors="coerce").astype(float)
        return v, ~np.isfinite(v) | (v != np.floor(v))

    for col, least in LEAST:
        if col in df:
            v, odd = integer(col)
            name(odd | (v < least), col, f"not an integer >= {least}")
    if "rank" in df:
        v, odd = integer("rank")
        cp = pd.to_numeric(df["cp_size"], errors="coerce").astype(float) if "cp_size" in df else np.inf
        name(odd | (v < 0) | (v >= cp), "rank", lambda i: f"not a rank of cp_size {int(cp[i])}: 0 to {int(cp[i]) - 1}"
             if "cp_size" in df and np.isfinite(cp[i]) else "not an integer >= 0")
    for col, kind in TYPES.items():
        if col in df:
            name(misfits(df[col], kind), col, f"not {WHAT[kind]}")
    return out


# The schema's stored columns and their JSON types (derived columns are computed on read, never stored).
TYPES = {c.name: c.type for c in COLUMNS.values() if c.role != "derived"}
WHAT = {"int": "a number", "float": "a number", "str": "text", "bool": "true / false", "list": "a list"}


def misfits(values: pd.Series, kind: str) -> pd.Series:
    """Where ``values`` (one column of a results frame) hold a value that does not fit the schema type ``kind``
    (``int | float | str | bool | list``); null (None, NaN) fits every type. A number is an int or float (a
    number written as text, ``"12"``, reads as one, as it always has); an int column may hold floats (pandas
    stores an int column with a null as floats); a list may be a numpy array (as parquet reads one)."""
    import numpy as np
    import pandas as pd

    if kind in ("int", "float") and pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return pd.Series(False, index=values.index)

    def odd(v) -> bool:
        if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
            return False
        if kind == "str":
            return not isinstance(v, str)
        if kind == "bool":
            return not isinstance(v, (bool, np.bool_))
        if kind == "list":
            return not isinstance(v, (list, tuple, np.ndarray))
        if isinstance(v, (bool, np.bool_)):  # JSON true where a number belongs
            return True
        if isinstance(v, (int, float, np.integer, np.floating)):
            return False
        return not isinstance(v, str) or pd.isna(pd.to_numeric(v, errors="coerce"))

    return values.map(odd).astype(bool)


def drop_bad_rows(df: pd.DataFrame, source, where: Sequence[str] | None = None) -> pd.DataFrame:
    """``df`` without the rows :func:`row_problems` names, with one :class:`CpbenchWarning` naming each left
    out row by ``source`` (its file), row and field (the first :data:`SHOWN`; the rest counted). ``where[i]``
    names row ``i`` of ``df`` in the file (``"line 7"`` of results.jsonl); default ``"row i+1"``.

    Raises:
        CpbenchInputError: no row is left (the same listing).
    """
    import pandas as pd

    problems = row_problems(df)
    bad = problems != ""
    if not bad.any():
        return df
    where = list(where) if where is not None else [f"row {i + 1}" for i in range(len(df))]
    named = [f"{where[pos]}: {problems.iloc[pos]}" for pos in range(len(df)) if bad.iloc[pos]]
    listing = "; ".join(named[:SHOWN]) + (f" (+{len(named) - SHOWN} more)" if len(named) > SHOWN else "")
    if bad.all():
        raise CpbenchInputError(f"{str(source)!r}: no row has valid values ({listing}): correct or delete "
                                "those rows")
    warnings.warn(f"{source}: left out {len(named)} row(s) (a hand-edited file?): {listing}", CpbenchWarning,
                  stacklevel=3)
    kept = df[~bad].reset_index(drop=True)
    for col in kept.columns:  # a number column that held text ("fast") holds numbers now: read it as one
        if TYPES.get(col) in ("int", "float") and kept[col].dtype == object:
            kept[col] = (pd.to_numeric(kept[col], errors="coerce") if kept[col].map(lambda v: isinstance(v, str)).any()
                         else kept[col].infer_objects())
    return kept


def _shown(value) -> str:
    """A cell's value as its JSON reads: ``null`` for a missing one, ``99`` for a float holding an integer."""
    if type(value).__module__ == "numpy":  # a numpy scalar: its Python value (repr would name numpy)
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)
