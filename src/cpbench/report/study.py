"""What an optional study adds to a run's report and charts (the studies live in ``cpbench/studies/``, above this
layer: the report never imports one; the commands hand their :class:`StudyReport` tuple down, ``studies.study_reports()``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd


def _nothing(*_args) -> tuple:
    return ()


@dataclass(frozen=True)
class StudyReport:
    """One study's part of a report.

    Attributes:
        name: the study's folder name (``line``).
        summary: ``(rows, view, cpu) -> markdown lines`` placed in the summary, after its bullets (rows: prepared,
            ``report.data.prepare``; view: their critical path, ``report.data.cells``; cpu: CPU wording).
        section: ``(rows, view, cpu) -> markdown lines`` placed after the workload sections.
        charts: ``(rows, cpu) -> ((stem, fn, title, caption), ...)`` it adds to one (model, backend) group's chart
            table (``fn(rows, out_dir, name, title) -> [paths]``), in CPU wording with ``cpu``.
        lead_charts: like ``charts``, placed before the core's charts.
        not_drawn: ``(rows, cpu) -> [(stem, why)]``: its charts the group has nothing to draw for (left out, the
            report says why).
    """

    name: str
    summary: Callable[[pd.DataFrame, pd.DataFrame, bool], list[str]] = _nothing
    section: Callable[[pd.DataFrame, pd.DataFrame, bool], list[str]] = _nothing
    charts: Callable[[pd.DataFrame, bool], tuple] = _nothing
    lead_charts: Callable[[pd.DataFrame, bool], tuple] = _nothing
    not_drawn: Callable[[pd.DataFrame, bool], list[tuple[str, str]]] = _nothing
