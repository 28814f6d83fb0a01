"""Check an engine's per-rank zigzag CP metadata against cpbench's (``cpbench geometry --check``; no torch).

A dump is JSON in the shape ``cpbench geometry --json`` prints: a list with one object per rank, keyed by
SGLang's field names (``rank``, ``actual_seq_q_prev``, ``kv_len_prev``, ``cu_seqlens_q_combined``, ...).
It may be wrapped in an object that also gives the batch with SGLang's ForwardBatch names::

    {"cp_size": 4, "extend_seq_lens": [11, 13], "extend_prefix_lens": [8, 14], "ranks": [{...}, ...]}

A dump may hold some ranks and some fields only (e.g. an engine without the fused fields); every field it
holds is compared. ``reason`` is text and is not compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cpbench.bench.geometry import rank_geometry, validate_batch
from cpbench.bench.jsonfile import read_json
from cpbench.errors import CpbenchInputError

LIST_FIELDS = ("actual_seq_q_prev", "actual_seq_q_next", "kv_len_prev", "kv_len_next", "cu_seqlens_q_combined",
               "cu_seqlens_kv_combined")
CHECKED_FIELDS = ("eligible", *LIST_FIELDS, "max_seqlen_q_combined")
BATCH_KEYS = ("cp_size", "extend_seq_lens", "extend_prefix_lens")
MAX_CP = 1024  # the bound of --cp


@dataclass(frozen=True)
class Dump:
    """A parsed dump: per-rank objects, and the batch when the dump gives it (else None)."""

    ranks: list[dict]
    cp_size: int | None = None
    extend_lens: list[int] | None = None
    prefix_lens: list[int] | None = None


def load_dump(path: str | Path) -> Dump:
    """Read and validate a dump (see the module docstring).

    Raises:
        CpbenchInputError: unreadable file, not JSON, not a list / object with ``ranks``, a rank object
            without an integer ``rank`` or with a repeated one, an unknown field, a value of the wrong type
            (lists of ints, an int, a bool), or no field to compare.
    """
    p = Path(path)
    obj = read_json(p, "--check")
    batch: dict = {}
    if isinstance(obj, dict):
        unknown = sorted(set(obj) - {*BATCH_KEYS, "ranks"})
        if unknown or not isinstance(obj.get("ranks"), list):
            raise CpbenchInputError(f"--check {str(p)!r}: an object needs 'ranks' (a list) and may give "
                                    f"{', '.join(BATCH_KEYS)}" + (f"; unknown key {unknown[0]!r}" if unknown else ""))
        batch = {k: obj[k] for k in BATCH_KEYS if k in obj}
        if batch and "cp_size" not in batch or batch and "extend_seq_lens" not in batch:
            raise CpbenchInputError(f"--check {str(p)!r}: a dump that gives the batch needs cp_size and "
                                    "extend_seq_lens (extend_prefix_lens optional)")
        obj = obj["ranks"]
    if not isinstance(obj, list) or not obj:
        raise CpbenchInputError(f"--check {str(p)!r} must hold a non-empty list of rank objects, as "
                                "`cpbench geometry --json` prints")
    seen, compared = set(), 0
    for i, r in enumerate(obj):
        where = f"--check {str(p)!r} item {i}"
        if not isinstance(r, dict) or not _is_int(r.get("rank")) or r["rank"] < 0:
            raise CpbenchInputError(f"{where}: every item must be an object with an integer 'rank' >= 0")
        if r["rank"] in seen:
            raise CpbenchInputError(f"{where}: rank {r['rank']} appears twice")
        seen.add(r["rank"])
        for k, v in r.items():
            if k not in (*CHECKED_FIELDS, "rank", "reason"):
                raise CpbenchInputError(f"{where}: unknown field {k!r}; fields use SGLang's names: "
                                        f"{', '.join(CHECKED_FIELDS)}")
            ok = (v is None or (k in LIST_FIELDS and isinstance(v, list) and all(_is_int(x) for x in v))
                  or (k == "max_seqlen_q_combined" and _is_int(v)) or (k == "eligible" and isinstance(v, bool))
                  or k in ("rank", "reason"))
            if not ok:
                raise CpbenchInputError(f"{where}: {k} must be "
                                        f"{'a list of integers' if k in LIST_FIELDS else 'an integer' if k != 'eligible' else 'true or false'}"
                                        f", got {json.dumps(v)[:60]}")
            compared += k in CHECKED_FIELDS
    if not compared:
        raise CpbenchInputError(f"--check {str(p)!r} holds no field to compare ({', '.join(CHECKED_FIELDS)})")
    for k in ("extend_seq_lens", "extend_prefix_lens"):
        if k in batch and not (isinstance(batch[k], list) and all(_is_int(x) for x in batch[k])):
            raise CpbenchInputError(f"--check {str(p)!r}: {k} must be a list of integers")
    if "cp_size" in batch and not (_is_int(batch["cp_size"]) and 1 <= batch["cp_size"] <= MAX_CP):
        raise CpbenchInputError(f"--check {str(p)!r}: cp_size must be an integer in [1, {MAX_CP}]")
    return Dump(obj, batch.get("cp_size"), batch.get("extend_seq_lens"), batch.get("extend_prefix_lens"))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def diff_dump(dump: Dump, extend_lens, prefix_lens, cp_size: int) -> tuple[list[str], int]:
    """Compare every field of every rank object of ``dump`` with :func:`rank_geometry` of the batch.

    Returns:
        ``(differences, fields compared)``; each difference is one line naming the rank and the field,
        e.g. ``rank 1 kv_len_prev: engine [12, 19], cpbench [12, 18]``.
    Raises:
        CpbenchInputError: a bad batch, or a rank outside ``[0, cp_size)``.
    """
    ext, pre = validate_batch(extend_lens, prefix_lens, cp_size)
    out, n = [], 0
    for r in sorted(dump.ranks, key=lambda r: r["rank"]):
        if r["rank"] >= cp_size:
            raise CpbenchInputError(f"the dump holds rank {r['rank']}, outside [0, cp_size={cp_size})")
        want = rank_geometry(ext, pre, cp_size, r["rank"]).to_json()
        for k in CHECKED_FIELDS:
            if k in r:
                n += 1
                if r[k] != want[k]:
                    out.append(f"rank {r['rank']} {k}: engine {json.dumps(r[k])}, cpbench {json.dumps(want[k])}")
    return out, n
