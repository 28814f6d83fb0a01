"""Key values as text: one spelling of a cell's key whether it was read from parquet, CSV or JSON lines,
and the sort order of key columns (compare and compare_speedup both key rows by it)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def canon(v) -> str:
    """A key value as text, equal for the same value read from parquet, CSV or JSON lines."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (list, tuple, np.ndarray)):
        return ",".join(canon(x) for x in v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def numeric_first(col: pd.Series) -> pd.Series:
    """Sort key for a key column: numbers as numbers (2048 before 16384), anything else as its text."""
    num = pd.to_numeric(col, errors="coerce")
    return num if num.notna().all() else col.map(canon)
