"""The size limits of a sweep's cell options, in one place: the CLI's list options (``cli/options.int_list``,
``cli/cells.parse_cells``), ``cpbench.grid`` and :class:`~cpbench.commands.config.SweepConfig` read them. Far above
real prefill batches, low enough that a typo cannot make cpbench build billions of Python objects (or overflow
the kernels' int32 token indices). Each check runs before anything is allocated from the values it checks."""

from __future__ import annotations

from cpbench.errors import CpbenchInputError

MAX_TOKENS = 1 << 24  # tokens of one request (extend or cached), of a --graph-buckets bucket
MAX_CP_SIZE = 1024
MAX_BS = 65536  # requests in one batch
MAX_VALUES = 65536  # values in one list option
MAX_CELLS = 100_000  # cells a sweep may plan
MAX_PLANNED_REQUESTS = MAX_TOKENS  # requests over every batch a sweep plans

# the upper bound of each list option, by every name the CLI reads it under
LIMITS = {"--cp": MAX_CP_SIZE, "--bs": MAX_BS, "--seq": MAX_TOKENS, "--seq-lens": MAX_TOKENS, "--extend": MAX_TOKENS,
          "--extend-len": MAX_TOKENS, "--extend-lens": MAX_TOKENS, "--prefix": MAX_TOKENS,
          "--prefix-lens": MAX_TOKENS, "--ranks": MAX_CP_SIZE - 1, "--graph-buckets": MAX_TOKENS}


def check_ints(values: list, name: str, minimum: int, maximum: int) -> list[int]:
    """``values`` if it is a non-empty list of at most :data:`MAX_VALUES` ints (not bools), each in
    ``[minimum, maximum]``; ``name`` (``--bs`` on the command line, ``bs`` from Python) names them in errors.

    Raises:
        CpbenchInputError: empty, too many values, a value that is not an integer, or one out of range.
    """
    if not values:
        raise CpbenchInputError(f"{name} is empty: give a list such as 1,4,16")
    if len(values) > MAX_VALUES:
        raise CpbenchInputError(f"{name} takes at most {MAX_VALUES} values, got {len(values)}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise CpbenchInputError(f"{name} must be integers, got {v!r}")
    low = next((v for v in values if v < minimum), None)
    if low is not None:
        raise CpbenchInputError(f"{name} values must be >= {minimum}, got {low}")
    high = next((v for v in values if v > maximum), None)
    if high is not None:
        raise CpbenchInputError(f"{name} values must be <= {maximum}, got {high}")
    return list(values)


def check_plan(cp_count: int, bs_list: list[int], lengths: int, names: str) -> None:
    """Refuse a ``cp_count`` x ``bs_list`` x ``lengths`` grid (each --bs value with each of ``lengths`` extend
    lengths, at each of ``cp_count`` cp sizes) of more than :data:`MAX_CELLS` cells or, over its batches, more
    than :data:`MAX_PLANNED_REQUESTS` requests; ``names`` says which options made it (``--cp x --bs x --extend-len``).

    Raises:
        CpbenchInputError: naming the count and what to do.
    """
    cells = cp_count * len(bs_list) * lengths
    if cells > MAX_CELLS:
        raise CpbenchInputError(f"{names} make {cells} cells, more than {MAX_CELLS}: sweep fewer values (or split "
                                "the sweep into several --out)")
    requests = sum(bs_list) * lengths
    if requests > MAX_PLANNED_REQUESTS:
        raise CpbenchInputError(f"{names} plan {requests} requests over their batches, more than "
                                f"{MAX_PLANNED_REQUESTS}: sweep fewer or smaller batches")
