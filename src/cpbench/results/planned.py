"""The manifest's ``planned_cells``: the keys of every (cell, timing) the sweeps of a run set out to measure, which
the report diffs against the rows ("not measured"). A hand-edited entry that is no such key (not an object, a
missing or unknown key, ``cp_size`` 0, a length as text) would be listed as a cell to resume; it is left out,
named in one warning. No torch here.
"""

from __future__ import annotations

import json
import warnings

from cpbench.errors import CpbenchWarning
from cpbench.results.schema import TIMINGS

PLANNED_CELL_KEYS = ("cp_size", "bs", "max_extend_len", "batch", "timing")  # one entry's keys (commands/manifest.py)
LEAST = {"cp_size": 1, "bs": 1, "max_extend_len": 1, "batch": 0}  # the integer keys and their smallest value
SHOWN = 5  # entries named in the warning; the rest are counted
_WARNED: set[tuple[str, str]] = set()


def entry_problem(entry) -> str | None:
    """Why ``entry`` is not a planned cell's key (``"cp_size 0 is not an integer >= 1"``), or None when it is one:
    an object with exactly :data:`PLANNED_CELL_KEYS`, integers (lengths in tokens) of at least :data:`LEAST`, and
    a timing of the schema."""
    if not isinstance(entry, dict):
        return "not an object"
    missing = [k for k in PLANNED_CELL_KEYS if k not in entry]
    if missing:
        return f"lacks {', '.join(missing)}"
    unknown = [k for k in entry if k not in PLANNED_CELL_KEYS]
    if unknown:
        return f"unknown key {', '.join(map(repr, unknown))}"
    for key, least in LEAST.items():
        v = entry[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            return f"{key} {json.dumps(v)} is not an integer >= {least}"
    if entry["timing"] not in TIMINGS:
        return f"timing {json.dumps(entry['timing'])} is not {' / '.join(TIMINGS)}"
    return None


def valid_planned_cells(entries: list, source) -> list[dict]:
    """The entries of a ``planned_cells`` list that are cell keys (:func:`entry_problem`), in order. The others are
    left out with one :class:`CpbenchWarning` naming each by ``source`` (the manifest's path), its place in the
    list (from 1) and its text; once per file and set of entries in a process (the manifest is read often)."""
    bad = [(i, e, p) for i, e in enumerate(entries, 1) if (p := entry_problem(e)) is not None]
    if not bad:
        return entries
    named = [f"entry {i} {_text(e)} ({p})" for i, e, p in bad]
    listing = "; ".join(named[:SHOWN]) + (f" (+{len(named) - SHOWN} more)" if len(named) > SHOWN else "")
    if (str(source), listing) not in _WARNED:
        _WARNED.add((str(source), listing))
        warnings.warn(f"{source}: left out {len(bad)} of {len(entries)} planned_cells entries, not cell keys "
                      f"(a hand-edited file?): {listing}", CpbenchWarning, stacklevel=3)
    left_out = {i for i, _, _ in bad}
    return [e for i, e in enumerate(entries, 1) if i not in left_out]


def _text(entry) -> str:
    """``entry`` as JSON, cut to 80 characters."""
    try:
        text = json.dumps(entry, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(entry)
    return text if len(text) <= 80 else text[:77] + "..."
