"""The cell plan, pure integers: the batches a command measures and the cells they make at each cp_size.

Every command names its cells one way: a list of :class:`Batch` (extend and prefix lengths per request)
crossed with the cp_size values. How the batches were given (``--bs`` x ``--extend-len``, one explicit
``--extend-lens`` batch, a ``--lengths`` mix, a ``--trace``, ``--prefix-hit``) is the CLI's business
(cli/cells.py); from there on only the batches exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Batch:
    """One prefill batch: ``extend_lens`` (new tokens) and ``prefix_lens`` (cached tokens) per request,
    in tokens, of equal length >= 1. ``index`` numbers the batches of a ``--lengths`` mix or ``--trace``
    (the ``batch`` column); 0 for a bs x extend-len grid or one explicit batch."""

    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    index: int = 0

    @classmethod
    def uniform(cls, extend_lens: Sequence[int], prefix: int = 0, index: int = 0) -> "Batch":
        """A batch whose requests all have ``prefix`` cached tokens."""
        return cls(tuple(extend_lens), (prefix,) * len(extend_lens), index)


@dataclass(frozen=True)
class CellKey:
    """The identity of a cell as every output names it: the results schema's cell columns, and the
    ``cells`` entries of ``profile.json``, ``explain.json`` and the NVTX range payloads.

    Attributes:
        cp_size: CP group size, ranks.
        extend_lens: extend (new-token) length of each request, tokens.
        prefix_lens: cached prefix of each request, tokens.
        batch: index of the batch in a ``--lengths`` mix or ``--trace`` (0 for a grid).
    """

    cp_size: int
    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]
    batch: int = 0

    @property
    def bs(self) -> int:
        """Requests in the batch."""
        return len(self.extend_lens)

    @property
    def max_extend_len(self) -> int:
        """The longest extend length of the batch (the ``max_extend_len`` column), tokens."""
        return max(self.extend_lens)

    @property
    def prefix_len(self) -> int:
        """The longest cached prefix of the batch (the ``prefix_len`` column), tokens."""
        return max(self.prefix_lens)

    def as_json(self, **extra) -> dict:
        """``{"cp_size", "bs", "max_extend_len", "extend_lens": [..]}`` then ``extra`` (e.g. ``rank=0``): the
        cell as JSON outputs name it (``profile.json``, ``explain.json``, NVTX payloads)."""
        return {"cp_size": self.cp_size, "bs": self.bs, "max_extend_len": self.max_extend_len,
                "extend_lens": list(self.extend_lens), **extra}

    def row_columns(self) -> dict:
        """The cell columns of a results row (schema role ``cell`` without ``timing``, plus ``batch`` and
        ``prefix_lens``); lists are comma-joined text, as stored."""
        return {"cp_size": self.cp_size, "bs": self.bs, "max_extend_len": self.max_extend_len,
                "prefix_len": self.prefix_len, "extend_lens": ",".join(map(str, self.extend_lens)),
                "batch": self.batch, "prefix_lens": ",".join(map(str, self.prefix_lens))}


@dataclass(frozen=True)
class CellSpec(CellKey):
    """One cell: a batch at one cp_size (lengths in tokens); its key's fields and sizes (``bs``,
    ``max_extend_len``, ``prefix_len``), plus the label the progress bar and NVTX ranges give it."""

    def key(self) -> CellKey:
        """The cell's :class:`CellKey` (the one way a cell is named in rows and JSON outputs)."""
        return CellKey(self.cp_size, self.extend_lens, self.prefix_lens, self.batch)

    def label(self) -> str:
        """``cp4 bs1 extend8192`` (``b<i>`` appended for a batch of a mix): the progress bar's and the NVTX
        ranges' name of the cell; ``extend`` is the longest extend length, tokens."""
        return f"cp{self.cp_size} bs{self.bs} extend{self.max_extend_len}" + (f" b{self.batch}" if self.batch else "")


def plan_cells(cp_sizes: Sequence[int], batches: Sequence[Batch]) -> list[CellSpec]:
    """Every cell, in cp_size order, then the batches' order."""
    return [CellSpec(cp, b.extend_lens, b.prefix_lens, b.index) for cp in cp_sizes for b in batches]
