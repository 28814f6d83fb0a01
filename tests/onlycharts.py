"""Imported by a subprocess test that asserts on a few chart files only: the charts named in
``$CPBENCH_TEST_CHARTS`` (comma-separated stems) are drawn; every other chart is built from the rows as
usual, but ``style.save`` returns its paths without drawing it (as the ``undrawn_charts`` fixture does
in-process). Drawing is most of a report's time.

``python tests/onlycharts.py ARGS`` runs ``cpbench ARGS`` that way."""

import os
from pathlib import Path

from cpbench.report import style

_KEEP = set(os.environ.get("CPBENCH_TEST_CHARTS", "").split(","))
_save = style.save


def _save_some(fig, out_dir, name):
    if name in _KEEP:
        return _save(fig, out_dir, name)
    return [Path(out_dir) / f"{name}.png", Path(out_dir) / f"{name}.svg"]


style.save = _save_some


if __name__ == "__main__":
    from cpbench.cli.app import entry

    entry()
