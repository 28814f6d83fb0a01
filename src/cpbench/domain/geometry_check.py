"""Check an engine's per-rank zigzag CP metadata against cpbench's (``cpbench geometry --check``; no torch).

A dump is JSON, in any of these shapes (docs/sglang-dump.md says how to write one from a running SGLang):

* one rank's object, batch and fields side by side, as one SGLang process writes it::

    {"cp_size": 4, "cp_rank": 0, "extend_seq_lens": [11, 13], "seq_lens": [19, 27],
     "actual_seq_q_prev_list": [2, 2], "cu_seqlens_q_combined_tensor": [0, 2, 4, 5, 6], ...}

* an object with the batch and ``"ranks": [{...}, ...]``, or a bare list of rank objects (what
  ``cpbench geometry --json`` prints; the batch then comes from --cp/--extend-lens/--prefix-lens);
* a directory: every ``*.json`` in it (one file per rank), all of one batch.

Field names are SGLang's (``X_list`` / ``X_tensor`` spellings) or cpbench's (:mod:`cpbench.domain.sglang_fields`).
The batch uses SGLang's ForwardBatch names: ``cp_size``, ``extend_seq_lens``, and the prefix as
``extend_prefix_lens`` or ``seq_lens`` (prefix = seq_len - extend_len); optional ``num_tokens``, the row
count build_metadata was given: when it exceeds the extend total, SGLang adds the difference to the last
request. Every field that is a function of the batch is compared; engine state and names cpbench does not
know are listed as not checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cpbench.domain.eligibility import CpRule
from cpbench.domain.geometry import rank_geometry, validate_batch
from cpbench.domain.jsonfile import read_json
from cpbench.domain.sglang_fields import (BATCH_KEYS, ENGINE_ONLY, NEEDS_PREFIX, RANK_KEYS, TABLES, canonical,
                                        expected_fields, table_difference, table_expectations,
                                        table_unchecked, table_value)
from cpbench.errors import CpbenchInputError

MAX_CP = 1024  # the bound of --cp
MAX_FILES = 1024
MAX_LEN = 2**31 - 1  # SGLang's metadata tensors are int32: a longer request (or num_tokens) is not a real dump
SHOWN = 16  # list items a message shows before "… (N more)"
# the batch's per-request lengths: the smallest value and the noun a message uses
LENGTHS = {"extend_seq_lens": (1, "extend length"), "extend_prefix_lens": (0, "prefix length"),
           "seq_lens": (0, "sequence length")}


def shown(values, keep: int = SHOWN) -> str:
    """``values`` as a list in a message: whole up to ``keep`` items, else the first ``keep`` and
    ``… (N more)``, so a batch of 200,000 requests is one readable line."""
    values = list(values)
    if len(values) <= keep:
        return str(values)
    return f"[{', '.join(map(str, values[:keep]))}, … ({len(values) - keep} more)]"


@dataclass
class Dump:
    """A parsed dump: rank objects (``{"rank": r, field: value}``, rank keys normalised to ``rank``) and
    the batch keys it gives (canonical names, see sglang_fields.BATCH_KEYS)."""

    ranks: list[dict]
    batch: dict = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Batch:
    """The batch a dump is checked against: ``extend_lens`` as build_metadata split them (the last one
    grown by ``num_tokens`` padding), ``prefix_lens`` (None: unknown), ``padded_by`` tokens added."""

    cp_size: int
    extend_lens: list[int]
    prefix_lens: list[int] | None
    padded_by: int = 0


@dataclass
class CheckResult:
    """``differences`` (one line each, dump order), ``compared`` (field count) and ``not_checked``
    (``{field: why}``)."""

    differences: list[str]
    compared: int
    not_checked: dict[str, str]


def load_dump(path: str | Path) -> Dump:
    """Read and validate a dump (module docstring): a file, or a directory of ``*.json`` files.

    Raises:
        CpbenchInputError: unreadable or not JSON; not one of the shapes; a rank object without an integer
            rank or one that repeats; a compared field of the wrong type; a batch length out of range (an
            extend length < 1, a negative prefix or sequence length, any above 2**31-1; the message names
            the field and the request); files of one directory that give different batches; nothing to
            compare.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.json"))
        if not files or len(files) > MAX_FILES:
            raise CpbenchInputError(f"--check {str(p)!r}: a directory needs 1..{MAX_FILES} *.json dumps, "
                                    f"found {len(files)}")
        parts = [_parse(read_json(f, "--check"), str(f)) for f in files]
    else:
        parts = [_parse(read_json(p, "--check"), str(p))]
    batch = parts[0][0]
    for (b, _), f in zip(parts[1:], files[1:] if p.is_dir() else []):
        if b != batch:
            raise CpbenchInputError(f"--check {str(f)!r} gives another batch than {str(files[0])!r}: one batch "
                                    "per directory")
    ranks = [r for _, rs in parts for r in rs]
    seen: set[int] = set()
    for r in ranks:
        if r["rank"] in seen:
            raise CpbenchInputError(f"--check {str(p)!r}: rank {r['rank']} appears twice")
        seen.add(r["rank"])
    if not any(canonical(k) for r in ranks for k in r if k != "rank"):
        raise CpbenchInputError(f"--check {str(p)!r} holds no field to compare (SGLang's "
                                "ZigzagContextParallelMetadata fields, e.g. actual_seq_q_prev_list)")
    return Dump(ranks, batch, str(p))


def _parse(obj, where: str) -> tuple[dict, list[dict]]:
    """``(batch, rank objects)`` of one file's JSON."""
    if isinstance(obj, dict) and "ranks" not in obj and any(k in obj for k in RANK_KEYS):
        batch = {BATCH_KEYS[k]: obj[k] for k in obj if k in BATCH_KEYS}
        obj = {"ranks": [{k: v for k, v in obj.items() if k not in BATCH_KEYS}], **batch}
    batch: dict = {}
    if isinstance(obj, dict):
        unknown = sorted(k for k in obj if k not in BATCH_KEYS and k != "ranks")
        if unknown or not isinstance(obj.get("ranks"), list):
            raise CpbenchInputError(f"--check {where!r}: an object needs 'ranks' (a list) or a rank key "
                                    f"({', '.join(RANK_KEYS)}), and may give cp_size, extend_seq_lens, "
                                    "extend_prefix_lens, seq_lens, num_tokens"
                                    + (f"; unknown key {unknown[0]!r}" if unknown else ""))
        batch = {BATCH_KEYS[k]: obj[k] for k in obj if k in BATCH_KEYS}
        obj = obj["ranks"]
    if not isinstance(obj, list) or not obj:
        raise CpbenchInputError(f"--check {where!r} must hold a non-empty list of rank objects, as "
                                "`cpbench geometry --json` prints, or one rank's SGLang metadata")
    _check_batch_types(batch, where)
    ranks = []
    for i, r in enumerate(obj):
        at = f"--check {where!r} item {i}"
        keys = [k for k in RANK_KEYS if isinstance(r, dict) and k in r]
        if len(keys) != 1 or not _is_int(r[keys[0]]) or r[keys[0]] < 0:
            raise CpbenchInputError(f"{at}: every item must be an object with one integer rank >= 0 "
                                    f"({' or '.join(RANK_KEYS)})")
        r = {("rank" if k == keys[0] else k): v for k, v in r.items()}
        for k, v in r.items():
            _check_type(k, v, at)
        ranks.append(r)
    return batch, ranks


def _check_batch_types(batch: dict, where: str) -> None:
    if batch and ("cp_size" not in batch or "extend_seq_lens" not in batch):
        raise CpbenchInputError(f"--check {where!r}: a dump that gives the batch needs cp_size and "
                                "extend_seq_lens (and extend_prefix_lens or seq_lens)")
    for k, (lo, noun) in LENGTHS.items():
        if k not in batch:
            continue
        vals = batch[k]
        if not (isinstance(vals, list) and all(_is_int(x) for x in vals)):
            raise CpbenchInputError(f"--check {where!r}: {k} must be a list of integers")
        i = next((i for i, x in enumerate(vals) if not lo <= x <= MAX_LEN), None)
        if i is not None:
            x, a = vals[i], "an" if noun[0] in "aeiou" else "a"
            what = (f"a negative {noun} ({x}" if x < 0 else f"{a} {noun} of 0 (" if x < lo else
                    f"{a} {noun} above {MAX_LEN} ({x}")
            raise CpbenchInputError(f"--check {where!r}: {k} {shown(vals)} holds {what}{', ' if x else ''}request {i}): "
                                    f"{noun}s must be in [{lo}, {MAX_LEN}] tokens")
    if "cp_size" in batch and not (_is_int(batch["cp_size"]) and 1 <= batch["cp_size"] <= MAX_CP):
        raise CpbenchInputError(f"--check {where!r}: cp_size must be an integer in [1, {MAX_CP}]")
    if "num_tokens" in batch and not (_is_int(batch["num_tokens"]) and 0 <= batch["num_tokens"] <= MAX_LEN):
        raise CpbenchInputError(f"--check {where!r}: num_tokens must be an integer in [0, {MAX_LEN}], got "
                                f"{_short(batch['num_tokens'])[:60]}")


INT32_MAX = 2**31 - 1  # page tables are int32 (block_tables [rows, W])


def _check_type(k: str, v, at: str) -> None:
    name = canonical(k)
    if name is None or v is None:
        return
    if name == "eligible":
        ok, want = isinstance(v, bool), "true or false"
    elif name in TABLES:
        ok = isinstance(v, list) and all(isinstance(row, list) and all(_is_int(x) for x in row) for row in v)
        want = "a list of rows of integers"
        widths = sorted({len(row) for row in v}) if ok else []
        if len(widths) > 1:  # ragged: no [rows, W] shape to compare, so the table itself is at fault
            raise CpbenchInputError(f"{at}: {k} has rows of {widths[0]} and {widths[-1]} entries: a page table is "
                                    "[rows, W], every row W entries")
        bad = next((x for row in v for x in row if not 0 <= x <= INT32_MAX), None) if ok else None
        if bad is not None:  # an int32 index into the KV pool: what the kernels read cannot be negative or wider
            raise CpbenchInputError(f"{at}: {k} holds page id {bad}, which no KV pool has: page ids are int32 "
                                    f"indices in [0, {INT32_MAX}]")
    elif name in ("max_seqlen_q_prev", "max_seqlen_q_next", "max_seqlen_q_combined", "total_q_prev_tokens",
                  "total_q_next_tokens", "tokens_padded", "total_seq_lens", "bs"):
        ok, want = _is_int(v), "an integer"
    else:
        ok, want = isinstance(v, list) and all(_is_int(x) for x in v), "a list of integers"
    if not ok:
        raise CpbenchInputError(f"{at}: {k} must be {want}, got {json.dumps(v)[:60]}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def resolve_batch(dump: Dump, cp: int | None, extend: list[int] | None, prefix: list[int] | None) -> Batch:
    """The batch to check ``dump`` against: the dump's own, else the options' (``--cp`` and ``--extend-lens``
    both required then); ``prefix`` (--prefix-lens) only where the dump gives no prefix.

    Raises:
        CpbenchInputError: a dump without its batch and no --cp / --extend-lens; options that clash with the
            dump's batch; extend_prefix_lens and seq_lens that
            disagree; a compared field needs the prefix and neither the dump nor --prefix-lens gives it;
            a bad batch (geometry.validate_batch).
    """
    b = dump.batch
    if b:
        if cp is not None or extend is not None:
            raise CpbenchInputError(f"{dump.source!r} gives the batch (cp_size, extend_seq_lens): drop --cp and "
                                    "--extend-lens")
        cp, ext = b["cp_size"], list(b["extend_seq_lens"])
        pre = _dump_prefix(b, ext, dump.source)
        if pre is not None and prefix is not None:
            raise CpbenchInputError(f"{dump.source!r} gives the prefix lengths: drop --prefix-lens")
        pre = prefix if pre is None else pre
    elif cp is None or extend is None:  # never check a dump against a batch nobody gave
        raise CpbenchInputError(f"{dump.source!r} does not say its batch (cp_size, extend_seq_lens): give --cp and "
                                "--extend-lens (and --prefix-lens) of the batch it was dumped from")
    else:
        cp, ext, pre = cp, extend, prefix
    if pre is not None and len(pre) == 1 and len(ext) > 1:
        pre = pre * len(ext)
    needs = sorted({k for r in dump.ranks for k, v in r.items() if canonical(k) in NEEDS_PREFIX and v is not None})
    if pre is None and needs:
        raise CpbenchInputError(f"{dump.source!r}: no prefix lengths, and {needs[0]} depends on them: the dump "
                                "needs extend_prefix_lens or seq_lens, or give --prefix-lens (0 for none)")
    validate_batch(ext, pre, cp)
    if cp == 1:
        raise CpbenchInputError("cp_size 1: SGLang builds no CP strategy and no CP metadata (no CP): nothing to check")
    pad = max(0, int(b.get("num_tokens", 0)) - sum(ext))
    return Batch(cp, ext[:-1] + [ext[-1] + pad], pre, pad)


def _dump_prefix(b: dict, ext: list[int], source: str) -> list[int] | None:
    """Prefix lengths from ``extend_prefix_lens``, or from ``seq_lens`` as SGLang derives them
    (``max(seq_len - extend_len, 0)``, zigzag.py ``build_metadata``: a padded last request's extend may
    exceed its seq_len). Negative lengths were refused when the dump was read (:func:`load_dump`)."""
    given = b.get("extend_prefix_lens")
    from_seq = [max(s - e, 0) for s, e in zip(b["seq_lens"], ext)] if "seq_lens" in b else None
    if from_seq is not None and len(b["seq_lens"]) != len(ext):
        raise CpbenchInputError(f"{source!r}: {len(ext)} extend_seq_lens but {len(b['seq_lens'])} seq_lens")
    if given is not None and from_seq is not None and list(given) != from_seq:
        raise CpbenchInputError(f"{source!r}: extend_prefix_lens {shown(given)} disagree with seq_lens - "
                                f"extend_seq_lens = {shown(from_seq)}")
    return list(given) if given is not None else from_seq


def diff_dump(dump: Dump, batch: Batch, rule: CpRule | None = None) -> CheckResult:
    """Compare every field of every rank object of ``dump`` with cpbench's for ``batch``; ``rule`` decides
    whether the batch runs with CP (default PR #33137's, :mod:`cpbench.domain.eligibility`).

    Returns:
        :class:`CheckResult`; a difference reads ``rank 1 kv_len_prev_list: engine [12, 19], cpbench [12, 18]``.
    Raises:
        CpbenchInputError: a rank outside ``[0, cp_size)``.
    """
    out, n, skipped = [], 0, {}
    for r in sorted(dump.ranks, key=lambda r: r["rank"]):
        if r["rank"] >= batch.cp_size:
            raise CpbenchInputError(f"the dump holds rank {r['rank']}, outside [0, cp_size={batch.cp_size})")
        g = rank_geometry(batch.extend_lens, batch.prefix_lens, batch.cp_size, r["rank"], rule)
        want = expected_fields(g, padded=r.get("per_rank_logical_token") is not None)
        tables = table_expectations(g, {k: r[k] for k in TABLES if k in r})
        if not want["eligible"] and "eligible" not in r and any(
                v is not None for k, v in r.items() if canonical(k) not in (None, "eligible")):
            out.append(f"rank {r['rank']} eligible: engine true (it built CP metadata), cpbench false ({g.reason})")
            n += 1
            # without CP cpbench has no metadata to compare the engine's with: one difference, not one per field
            skipped.update({k: "the batch runs without CP under this rule (the engine ran it with CP): "
                               "check with the rule the engine used, e.g. --cp-min-extend pr"
                            for k in r if k not in ("rank", "reason") and canonical(k) != "eligible"})
            continue
        for k, v in r.items():
            name = canonical(k)
            if k in ("rank", "reason"):
                continue
            if name is None:
                skipped[k] = "engine state, not a function of the batch" if k in ENGINE_ONLY else "not a field cpbench knows"
                continue
            if name in TABLES:  # null is a value, as in every other field: compared with what cpbench expects
                if name.startswith("zigzag") and not want["eligible"]:
                    if v is None:  # no fused call, no duplicated table: agrees
                        n += 1
                    else:
                        skipped[k] = "no fused call: the batch runs without CP under the rule"
                    continue
                if tables.get(name) is None:
                    skipped[k] = table_unchecked(name, r, g.bs)
                    continue
                n += 1
                got, exp = table_value(name, v), tables[name]
                if got != exp:
                    out.append(f"rank {r['rank']} {k}: {table_difference(name, got, exp)}")
                continue
            n += 1
            got, exp = v, want[name]
            if got != exp:
                out.append(f"rank {r['rank']} {k}: engine {_short(got)}, cpbench {_short(exp)}{_where(got, exp)}")
    return CheckResult(out, n, skipped)


def _short(v) -> str:
    text = shown(v) if isinstance(v, list) else json.dumps(v)
    return text if len(text) <= 200 else text[:199] + "…"


def _where(got, exp) -> str:
    """Where two long lists part, when the shortened lists in a message may not show it."""
    if not (isinstance(got, list) and isinstance(exp, list)) or max(len(got), len(exp)) <= SHOWN:
        return ""
    if len(got) != len(exp):
        return f" ({len(got)} items, cpbench {len(exp)})"
    i = next(i for i, (a, b) in enumerate(zip(got, exp)) if a != b)
    return f" (first at item {i}: engine {json.dumps(got[i])}, cpbench {json.dumps(exp[i])})"
