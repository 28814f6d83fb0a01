"""The cells a command measures, parsed once for ``sweep`` and ``profile``: --cp, --bs, --seq, --seq-lens,
--prefix, --ranks (and --out, the backend), each bad value a CpbenchInputError naming its option."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from cpbench.cli_options import MAX_TOKENS, int_list
from cpbench.errors import CpbenchInputError


@dataclass(frozen=True)
class Cells:
    """Validated cell options. ``seq_lens`` (one explicit batch) replaces ``bs_list`` x ``seq_list``,
    which still hold the values given or the command's defaults (a sweep's manifest records them)."""

    cp_sizes: list[int]
    bs_list: list[int]
    seq_list: list[int]
    seq_lens: Optional[list[int]]
    prefix: int
    ranks: Optional[list[int]]  # None: every rank

    @property
    def batches(self) -> list[tuple[int, ...]]:
        """Extend lengths per request of each batch: the explicit one, or every bs x seq in that order."""
        if self.seq_lens:
            return [tuple(self.seq_lens)]
        return [(s,) * b for b in self.bs_list for s in self.seq_list]

    @property
    def longest(self) -> int:
        """Tokens of the longest sequence, prefix included."""
        return max(self.seq_lens or self.seq_list) + self.prefix


def parse_cells(*, cp: str, bs: Optional[str], seq: Optional[str], seq_lens: Optional[str], prefix: int,
                ranks: str, default_bs: str, default_seq: str) -> Cells:
    """Parse the cell options of ``sweep`` / ``profile`` (``bs``/``seq`` None: ``default_bs``/``default_seq``).

    Raises CpbenchInputError: an empty or out-of-range list, ``--seq-lens`` with ``--bs``/``--seq``, a
    ``--prefix`` outside ``[0, MAX_TOKENS]``, a ``--ranks`` value outside ``[0, min(--cp))``.
    """
    if seq_lens is not None:
        if not seq_lens.strip():
            raise CpbenchInputError("--seq-lens is empty: give lengths such as 3000,5000, or leave it out")
        if bs is not None or seq is not None:
            raise CpbenchInputError("--seq-lens gives the whole batch, so --bs and --seq do not apply: "
                                    "drop one or the other")
    explicit = int_list(seq_lens, "--seq-lens") if seq_lens else None
    bs_list = int_list(default_bs if bs is None else bs, "--bs")
    seq_list = int_list(default_seq if seq is None else seq, "--seq")
    if not 0 <= prefix <= MAX_TOKENS:
        raise CpbenchInputError(f"--prefix must be in [0, {MAX_TOKENS}] tokens, got {prefix}")
    cps = int_list(cp, "--cp")
    rank_list = None if ranks.strip() == "all" else int_list(ranks, "--ranks", minimum=0)
    if rank_list and max(rank_list) >= min(cps):
        raise CpbenchInputError(f"--ranks {max(rank_list)} is outside [0, cp_size) for cp_size {min(cps)}")
    return Cells(cps, bs_list, seq_list, explicit, prefix, rank_list)


def check_out(out: Optional[str], default: str) -> None:
    """Refuse an empty ``--out`` (``default``: where the command writes without one)."""
    if out is not None and not str(out).strip():
        raise CpbenchInputError(f"--out is empty: give a directory, or leave it out for {default}")


def backend_name(backend: str, device) -> str:
    """``--backend``, with ``auto`` resolved for ``device``."""
    from cpbench.bench.backends import resolve_auto

    return resolve_auto(device) if backend == "auto" else backend
