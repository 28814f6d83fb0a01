"""Tracebacks of the exceptions that became ``error`` rows: a row keeps one line (its ``reason``), the
sweep writes the whole traceback to ``RUN/errors/`` so a crash in cpbench or a backend can be debugged."""

from __future__ import annotations

import traceback


class Tracebacks:
    """The tracebacks of this process's failures, by the ``reason`` their rows carry.

    A reason can be shared by several rows (every mode and timing of a rank, every rank of a simulated
    cell), so :meth:`take` reads without removing; :meth:`clear` empties it between cells."""

    def __init__(self) -> None:
        self._by_reason: dict[str, str] = {}

    def record(self, reason: str, exc: BaseException) -> None:
        """Keep ``exc``'s formatted traceback under ``reason`` (the first one wins for a repeated reason)."""
        self._by_reason.setdefault(reason, "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))

    def alias(self, reason: str, new_reason: str) -> None:
        """File the traceback kept under ``reason`` under ``new_reason`` too (a reason given a prefix)."""
        if reason in self._by_reason:
            self._by_reason.setdefault(new_reason, self._by_reason[reason])

    def take(self, reason: str) -> str | None:
        """The traceback recorded under ``reason``, or under what follows a prefix the agreement over the
        ranks gave it (``"rank 1: <reason>"``); None for a failure met on another process's rank."""
        if reason in self._by_reason:
            return self._by_reason[reason]
        return next((tb for r, tb in self._by_reason.items() if reason.endswith(f": {r}")), None)

    def clear(self) -> None:
        self._by_reason.clear()
