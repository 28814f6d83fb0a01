"""Console tables that never cut a number: a rich table whose headers wrap when the terminal is narrow,
or, when even that does not fit, one block per record (``header: value`` lines).

Every command that prints a table of numbers (sweep, profile, geometry) goes through :func:`print_table`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Col:
    """A column: ``header`` text; ``number``: its values are never wrapped or cut (a text column, such as
    a status with its reason, may wrap at word boundaries); ``left``: left-aligned (names)."""

    header: str
    number: bool = True
    left: bool = False


TEXT_MIN = 12  # a text column keeps at least this many characters per line


def column_widths(cols: list[Col], rows: list[list[str]]) -> list[int]:
    """Each column's narrowest width: its widest value (a text column: at most TEXT_MIN) or the longest
    word of its header, whichever is wider."""
    widths = []
    for i, c in enumerate(cols):
        values = [len(r[i]) for r in rows] or [0]
        head = max((len(w) for w in c.header.split()), default=1)
        body = max(values) if c.number else min(max(values), TEXT_MIN)
        widths.append(max(head, body))
    return widths


def table_width(cols: list[Col], rows: list[list[str]], boxed: bool = True) -> int:
    """Characters the table needs with every number on one line and headers wrapped at spaces: boxed
    (rich's default box: one space of padding each side of a cell, a rule between columns and at both
    ends), or without a box (two spaces between columns)."""
    return sum(column_widths(cols, rows)) + (3 * len(cols) + 1 if boxed else 2 * (len(cols) - 1))


def print_table(console: Console, title: str, cols: list[Col], rows: list[list[str]],
                footer: list[str] | None = None) -> None:
    """Print ``rows`` (plain text, no markup) under ``title``: a boxed table if it fits ``console.width``,
    else one without a box, else one block per row, ``header  value`` per line (the value on a line of its own when both do not fit), so no
    value is ever cut with "…". ``footer``: a last row
    drawn in bold (e.g. totals)."""
    body = rows + ([footer] if footer else [])
    fits = [boxed for boxed in (True, False) if table_width(cols, body, boxed) <= console.width]
    if fits:
        t = (Table(title=escape(title), title_justify="left") if fits[0] else
             Table(title=escape(title), title_justify="left", box=None, pad_edge=False, padding=(0, 1),
                   show_edge=False))
        widths = column_widths(cols, body)
        spare = console.width - table_width(cols, body, fits[0])
        for i in sorted(range(len(cols)), key=lambda i: (cols[i].number, -i)):  # spare: text columns, last first
            want = max([len(r[i]) for r in body] + [len(cols[i].header)])  # up to their widest value
            grow = min(spare, max(0, want - widths[i]))
            widths[i] += grow
            spare -= grow
        for c, w in zip(cols, widths):  # fixed widths: rich must not shrink a number or cut a header
            t.add_column(escape(c.header), justify="right" if c.number and not c.left else "left", width=w,
                         overflow="fold", no_wrap=False)
        for r in rows:
            t.add_row(*(Text(v) for v in r))
        if footer:
            t.add_row(*(Text(v, style="bold") for v in footer))
        console.print(t)
        return
    console.print(Text(title, style="bold"), soft_wrap=False)
    width = max(len(c.header) for c in cols)
    for r in body:
        for c, v in zip(cols, r):
            if v == "":
                continue
            line = f"  {c.header.ljust(width)}  {v}"
            if len(line) > console.width:  # the value on a line of its own, never split
                line = f"  {c.header}\n    {v}"
            console.print(Text(line), soft_wrap=True)
        console.print()
