"""Fault injection, to check how a torchrun launch behaves when one rank fails (docs/faults.md).

``CPBENCH_INJECT_FAULT="<rank>:<fault>[:<cell>[:<phase>]][,...]"`` makes global rank ``<rank>`` fail
(several faults separated by commas, each firing on its own):

* faults: ``raise`` (a RuntimeError), ``oom`` (torch.OutOfMemoryError), ``exit`` (the process dies,
  ``os._exit(3)``), ``stop`` (the process stops itself with SIGSTOP: a rank that stops answering);
* ``<cell>``: only the cell-th cell this process begins, counting from 1 (empty or ``*``: every cell);
* phases: ``prepare`` (default: while preparing a forward, before any collective of the cell's modes)
  or ``forward`` (inside the first forward of a mode, just before its last layer's K|V all-gather,
  after the other layers' gathers ran; needs ``--gather packed|separate``).
"""

from __future__ import annotations

import os
import signal
from typing import Optional

from cpbench.errors import CpbenchInputError

ENV = "CPBENCH_INJECT_FAULT"
FAULTS = ("raise", "oom", "exit", "stop")
PHASES = ("prepare", "forward")

Fault = tuple[int, str, Optional[int], str]  # (rank, fault, cell counting from 1 or None for every cell, phase)


def parse(spec: str | None = None, world_size: int | None = None) -> list[Fault]:
    """The faults of ``spec`` (default: ``$CPBENCH_INJECT_FAULT``), comma-separated, each as
    ``(rank, fault, cell or None, phase)``; [] when empty. Raises CpbenchInputError for a malformed
    entry, or one naming a rank outside ``[0, world_size)`` (when given: the fault would never fire)."""
    spec = os.environ.get(ENV, "") if spec is None else spec
    return [_parse_one(s, spec, world_size) for s in spec.split(",")] if spec.strip() else []


def check_can_fire(world_size: int, cell_cp_sizes: list[int], gather: str) -> None:
    """Before a launch of ``world_size`` processes that plans cells of ``cell_cp_sizes`` (one cp_size per
    cell, in order) with ``gather`` (``packed``, ``separate`` or ``none``): refuse a fault that could never
    fire, so a fault test cannot pass by injecting nothing. A cell of cp_size C runs on ranks 0..C-1 only.

    Raises:
        CpbenchInputError: a malformed entry, a rank the launch lacks, a cell beyond the plan, a rank
            outside the named cell's ranks (or outside every cell's, for ``*``), or a ``forward`` fault
            without a gather (it fires just before a layer's gather).

    A fault can still not fire where the cell does not run at all (not CP-eligible, over the token cap,
    already measured on ``--resume``): docs/faults.md says so.
    """
    cells = len(cell_cp_sizes)
    for rank, fault, cell, phase in parse(world_size=world_size):
        entry = f"{ENV} entry {rank}:{fault}:{'*' if cell is None else cell}:{phase}"
        if cell is not None and cell > cells:
            raise CpbenchInputError(f"{entry} names cell {cell}, but the sweep plans {cells} cell(s): name a cell "
                                    f"in 1..{cells}, or * for every cell")
        sizes = cell_cp_sizes if cell is None else [cell_cp_sizes[cell - 1]]
        if all(rank >= cp for cp in sizes):
            where = "any cell" if cell is None else f"cell {cell} (cp_size {sizes[0]}: ranks 0..{sizes[0] - 1})"
            raise CpbenchInputError(f"{entry} names rank {rank}, which measures no part of {where}: name a rank "
                                    "below the cell's cp_size")
        if phase == "forward" and gather == "none":
            raise CpbenchInputError(f"{entry} fires before a layer's K|V all-gather, and --gather none runs "
                                    "none: use phase prepare, or --gather packed|separate")


def _parse_one(entry: str, spec: str, world_size: int | None) -> Fault:
    parts = [p.strip() for p in entry.split(":")]
    parts += [""] * (4 - len(parts))
    rank, fault, cell, phase = parts[:4]
    shown = f"{ENV}={spec!r}" + (f" (entry {entry.strip()!r})" if "," in spec else "")
    form = f"{shown} is not <rank>:<fault>[:<cell>[:<phase>]] with fault one of {'|'.join(FAULTS)} " \
           f"and phase one of {'|'.join(PHASES)} (several: separate them with commas)"
    if len(parts) > 4 or not (rank.isascii() and rank.isdigit()) or fault not in FAULTS or phase not in ("", *PHASES) \
            or not (cell in ("", "*") or (cell.isascii() and cell.isdigit() and int(cell) >= 1)):
        raise CpbenchInputError(form)
    if world_size is not None and int(rank) >= world_size:
        valid = "rank 0" if world_size == 1 else f"ranks 0..{world_size - 1}"
        raise CpbenchInputError(f"{shown} names rank {int(rank)}, but the launch has only {valid}: "
                                f"name one of {valid}")
    return int(rank), fault, int(cell) if cell.isascii() and cell.isdigit() else None, phase or "prepare"


def inject(rank: int, cell: int, phase: str) -> None:
    """Fail here when an entry of ``$CPBENCH_INJECT_FAULT`` names this rank, cell (counting from 1) and
    phase (the first such entry fires)."""
    hits = [f for who, f, when, where in parse() if who == rank and when in (None, cell) and where == phase]
    if not hits:
        return
    fault = hits[0]
    if fault == "exit":
        os._exit(3)
    if fault == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    if fault == "oom":
        import torch

        raise torch.OutOfMemoryError(f"injected oom on rank {rank} ({ENV})")
    raise RuntimeError(f"injected fault on rank {rank} ({ENV})")
