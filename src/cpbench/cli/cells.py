"""The cells a command measures, parsed once for ``sweep`` and ``profile``: --cp, --bs, --extend-len, --extend-lens,
--prefix, --ranks (and --out, the backend), each bad value a CpbenchInputError naming its option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cpbench.cli.options import MAX_TOKENS, int_list, typed
from cpbench.domain.cells import Batch
from cpbench.domain.limits import MAX_PLANNED_REQUESTS, check_plan
from cpbench.errors import CpbenchInputError


@dataclass(frozen=True)
class Cells:
    """Validated cell options. ``extend_lens`` (one explicit batch) replaces ``bs_list`` x ``extend_len_list``,
    which still hold the values given or the command's defaults (a sweep's manifest records them)."""

    cp_sizes: list[int]
    bs_list: list[int]
    extend_len_list: list[int]
    extend_lens: Optional[list[int]]
    prefix: int
    ranks: Optional[list[int]]  # None: every rank

    @property
    def batches(self) -> list[tuple[int, ...]]:
        """Extend lengths per request of each batch: the explicit one, or every bs x extend length in that order."""
        if self.extend_lens:
            return [tuple(self.extend_lens)]
        return [(s,) * b for b in self.bs_list for s in self.extend_len_list]

    @property
    def longest(self) -> int:
        """Tokens of the longest sequence, prefix included."""
        return max(self.extend_lens or self.extend_len_list) + self.prefix


def parse_cells(*, cp: str, bs: Optional[str], extend_len: Optional[str], extend_lens: Optional[str], prefix: int,
                ranks: str, default_bs: str, default_extend_len: str) -> Cells:
    """Parse the cell options of ``sweep`` / ``profile`` (``bs``/``extend_len`` None: ``default_bs`` /
    ``default_extend_len``).

    Raises CpbenchInputError: an empty or out-of-range list, ``--extend-lens`` with ``--bs``/``--extend-len``, a
    ``--prefix`` outside ``[0, MAX_TOKENS]``, a ``--ranks`` value outside ``[0, min(--cp))`` or repeated.
    """
    lens_opt, seq_opt = typed("--extend-lens", "--seq-lens"), typed("--extend-len", "--seq")
    if extend_lens is not None:
        if not extend_lens.strip():
            raise CpbenchInputError(f"{lens_opt} is empty: give lengths such as 3000,5000, or leave it out")
        if bs is not None or extend_len is not None:
            raise CpbenchInputError(f"{lens_opt} gives the whole batch, so --bs and {seq_opt} do not apply: "
                                    "drop one or the other")
    explicit = int_list(extend_lens, lens_opt) if extend_lens else None
    bs_list = int_list(default_bs if bs is None else bs, "--bs")
    extend_len_list = int_list(default_extend_len if extend_len is None else extend_len, seq_opt)
    if not 0 <= prefix <= MAX_TOKENS:
        raise CpbenchInputError(f"{typed('--prefix-len', '--prefix')} must be in [0, {MAX_TOKENS}] tokens, got {prefix}")
    cps = int_list(cp, "--cp")
    rank_list = None if ranks.strip() == "all" else int_list(ranks, "--ranks", minimum=0)
    if rank_list and len(set(rank_list)) < len(rank_list):
        again = next(r for i, r in enumerate(rank_list) if r in rank_list[:i])
        raise CpbenchInputError(f"--ranks repeats rank {again}: give each rank once (a rank measured twice "
                                "would be counted twice)")
    if rank_list and max(rank_list) >= min(cps):
        raise CpbenchInputError(f"--ranks {max(rank_list)} is outside [0, cp_size) for cp_size {min(cps)}")
    cps, bs_list, extend_len_list = (list(dict.fromkeys(v)) for v in (cps, bs_list, extend_len_list))  # a repeat is one cell
    if not explicit:
        check_plan(len(cps), bs_list, len(extend_len_list), f"--cp x --bs x {seq_opt}")
    return Cells(cps, bs_list, extend_len_list, explicit, prefix, rank_list)


def check_out(out: Optional[str], default: str) -> None:
    """Refuse an empty ``--out`` (``default``: where the command writes without one)."""
    if out is not None and not str(out).strip():
        raise CpbenchInputError(f"--out is empty: give a directory, or leave it out for {default}")


def check_not_written(run_dir: Path, name: str) -> None:
    """Refuse to write ``run_dir/name`` (``profile.json``, ``explain.json``) over an earlier command's:
    what was measured is never lost. Raises CpbenchInputError naming the file."""
    if (Path(run_dir) / name).exists():
        raise CpbenchInputError(f"{str(Path(run_dir) / name)!r} holds an earlier result: pick another --out, or "
                                "move that file away to write a new one here")


def backend_name(backend: str, device) -> str:
    """``--backend``, with ``auto`` resolved for ``device``."""
    from cpbench.kernels.backends import resolve_auto

    return resolve_auto(device) if backend == "auto" else backend


def workload_batches(cells: Cells, *, lengths: Optional[str], trace: Optional[str], prefix_hit: Optional[float],
                     batches: Optional[int], seed: int, extend_len_given: bool) -> Optional[list]:
    """The batches of ``--lengths``, ``--trace`` or ``--prefix-hit`` as ``[[extend_lens], [prefix_lens]]``
    per batch (:func:`cpbench.domain.lengths.plan_batches`), or None for a plain bs x extend-len grid / --extend-lens.
    ``--prefix-hit`` alone applies to every --extend-len (or --extend-lens) length.

    Raises CpbenchInputError: --lengths with --trace, either with --extend-len or --extend-lens, a bad value."""
    from cpbench.domain.lengths import LengthMix, parse_lengths, plan_batches, read_trace

    if lengths is None and trace is None and batches is not None:
        raise CpbenchInputError("--batches applies to --lengths or --trace: add one, or drop --batches")
    if lengths is None and trace is None and prefix_hit is None:
        return None
    if lengths is not None and trace is not None:
        raise CpbenchInputError("--lengths and --trace both give the request lengths: keep one")
    if prefix_hit is not None and cells.prefix:
        raise CpbenchInputError("--prefix and --prefix-hit both set the cached prefix: keep one")
    if (lengths is not None or trace is not None) and (extend_len_given or cells.extend_lens):
        raise CpbenchInputError("--lengths / --trace give the request lengths, so --extend-len and --extend-lens do not "
                                "apply: drop them")
    if batches is not None and not 1 <= batches <= 65536:
        raise CpbenchInputError(f"--batches must be in [1, 65536], got {batches}")
    requests = (batches or 4) * sum(cells.bs_list)
    if lengths is not None and requests > MAX_PLANNED_REQUESTS:
        raise CpbenchInputError(f"--lengths with --batches {batches or 4} x --bs {','.join(map(str, cells.bs_list))} "
                                f"draws {requests} requests, more than {MAX_PLANNED_REQUESTS}: use fewer --batches or "
                                "smaller --bs")
    if lengths is not None:
        mix = parse_lengths(lengths)
    elif trace is None:  # --prefix-hit on the grid (or the explicit batch): a fixed list per bs x extend length
        if cells.extend_lens:
            mix = LengthMix("list", tuple(cells.extend_lens))
            return [[list(e), list(p)] for e, p in plan_batches([len(cells.extend_lens)], mix=mix,
                                                                prefix_hit=prefix_hit)]
        out = []
        for bs in cells.bs_list:
            for seq in cells.extend_len_list:
                out += plan_batches([bs], mix=LengthMix("list", (seq,) * bs), prefix_hit=prefix_hit)
        return [[list(e), list(p)] for e, p in out]
    else:
        mix = None
    found = plan_batches(cells.bs_list, mix=mix, trace=read_trace(trace) if trace is not None else None,
                         prefix=cells.prefix, prefix_hit=prefix_hit, batches=batches, seed=seed)
    return [[list(e), list(p)] for e, p in found]


def batches_of(cells: Cells, mix: Optional[list]) -> tuple[Batch, ...]:
    """The batches a command measures, the one way cells are named from here on (domain.cells): the batches
    of a ``--lengths`` mix, ``--trace`` or ``--prefix-hit`` (:func:`workload_batches`, numbered by their
    ``index``), else every ``--bs`` x ``--extend-len`` (or the one ``--extend-lens`` batch) with ``--prefix``."""
    if mix is not None:
        return tuple(Batch(tuple(ext), tuple(pre), i) for i, (ext, pre) in enumerate(mix))
    return tuple(Batch.uniform(ext, cells.prefix) for ext in cells.batches)


def cells_record(cells: Cells, mix: Optional[list], *, lengths: Optional[str], trace: Optional[str],
                 prefix_hit: Optional[float]) -> tuple[tuple[str, object], ...]:
    """The options the batches came from, as a sweep's manifest records them (``SweepConfig.cells_from``):
    bs_list, extend_len_list, extend_lens, prefix, the mix's batches, lengths, trace, prefix_hit."""
    return (("bs_list", list(cells.bs_list)), ("extend_len_list", list(cells.extend_len_list)), ("extend_lens", cells.extend_lens),
            ("prefix", cells.prefix), ("batches", mix), ("lengths", lengths), ("trace", trace),
            ("prefix_hit", prefix_hit))
