"""SGLang's zigzag CP metadata, field by field, as a function of the batch (no torch).

SGLang keeps one ``ZigzagContextParallelMetadata`` per forward and CP rank (``layers/cp/zigzag.py``,
``ZigzagCPStrategy.build_metadata``, then ``layers/cp/padding.py`` ``pad_logical_token_to_physical``);
its TRT-LLM backend keeps the page tables (``layers/attention/trtllm_mha_backend.py``,
``TRTLLMMHAMetadata``). This module says, for every field name a dump may carry, what cpbench expects:

* per-request lists are spelled ``X_list`` (host lists) or ``X_tensor`` (int32 device tensors, dumped with
  ``.tolist()``) by SGLang and ``X`` by cpbench (``geometry --json``); all three name one value;
* batch-wide layout fields (``split_list``, ``cp_reverse_index``, ``reverse_split_len``,
  ``per_rank_actual_token``, ``max_rank_len``, ``per_rank_logical_token``, ``total_seq_lens``, ``bs``) are
  the same on every rank; ``zigzag_index`` is the rank's own;
* page tables are engine page ids, so only their relation to the batch is checked (see
  :func:`table_expectations`);
* :data:`ENGINE_ONLY` fields are engine state, not a function of the batch: listed as not checked.

All lengths are tokens, all values Python ints (lists of ints).
"""

from __future__ import annotations

import json

from cpbench.domain.geometry import RankGeometry, block_sizes

# per-request fields: canonical (cpbench) name -> also accepted with these suffixes
PER_REQUEST = ("actual_seq_q_prev", "actual_seq_q_next", "kv_len_prev", "kv_len_next",
               "actual_seq_q_combined", "kv_len_combined")
CUMULATIVE = ("cu_seqlens_q_prev", "cu_seqlens_q_next", "cu_seqlens_kv_prev", "cu_seqlens_kv_next",
              "cu_seqlens_q_combined", "cu_seqlens_kv_combined")
SCALARS = ("max_seqlen_q_prev", "max_seqlen_q_next", "max_seqlen_q_combined", "total_q_prev_tokens",
           "total_q_next_tokens", "tokens_padded")
LAYOUT = ("zigzag_index", "split_list", "cp_reverse_index", "reverse_split_len", "per_rank_actual_token",
          "max_rank_len", "per_rank_logical_token", "total_seq_lens", "bs")
TABLES = ("page_table", "swa_page_table", "zigzag_page_table", "zigzag_swa_page_table")
CANONICAL = ("eligible", *PER_REQUEST, *CUMULATIVE, *SCALARS, *LAYOUT)
# canonical fields whose value depends on the prefix lengths
NEEDS_PREFIX = frozenset({"kv_len_prev", "kv_len_next", "kv_len_combined", "cu_seqlens_kv_prev",
                          "cu_seqlens_kv_next", "cu_seqlens_kv_combined"})
ENGINE_ONLY = frozenset({"pending_mla_kv_materializations", "out_cache_loc", "swa_out_cache_loc",
                         "req_pool_indices", "cache_seqlens_int32", "cu_seqlens_k", "cu_seqlens_q",
                         "max_seq_len_q", "max_seq_len_k"})
# the batch: SGLang ForwardBatch names (``*_cpu`` host copies accepted too), and the rank
BATCH_KEYS = {"cp_size": "cp_size", "attn_cp_size": "cp_size", "extend_seq_lens": "extend_seq_lens",
              "extend_seq_lens_cpu": "extend_seq_lens", "extend_prefix_lens": "extend_prefix_lens",
              "extend_prefix_lens_cpu": "extend_prefix_lens", "seq_lens": "seq_lens", "seq_lens_cpu": "seq_lens",
              "num_tokens": "num_tokens"}
RANK_KEYS = ("rank", "cp_rank", "attn_cp_rank")


def _aliases() -> dict[str, str]:
    out = {name: name for name in (*CANONICAL, *TABLES)}
    for name in PER_REQUEST:
        out[name + "_list"] = out[name + "_tensor"] = name
    for name in CUMULATIVE:
        out[name + "_tensor"] = name
    return out


ALIASES = _aliases()


def canonical(name: str) -> str | None:
    """The cpbench name of a dump field (``kv_len_prev_list`` -> ``kv_len_prev``), None if not a
    metadata field cpbench derives (page tables map to themselves)."""
    return ALIASES.get(name)


def batch_layout(extend_lens, cp_size: int) -> dict:
    """The batch-wide zigzag layout, before padding (SGLang build_metadata).

    Returns ``split_list`` (``bs * 2C`` block sizes, request-major), ``cp_reverse_index`` (for each request,
    where its blocks 0..2C-1 sit in the rank-major all-gather of prev/next blocks), ``reverse_split_len``
    (block sizes in that rank-major order: rank r's prev blocks of every request, then its next blocks),
    ``per_rank_logical_token`` (real rows per rank) and ``total_seq_lens``.
    """
    n, bs = 2 * cp_size, len(extend_lens)
    blocks = [block_sizes(e, cp_size) for e in extend_lens]
    # gathered order: rank r contributes [prev(req 0..bs-1), next(req 0..bs-1)] -> chunk r*2bs + ...
    where = {}
    for r in range(cp_size):
        for s in range(bs):
            where[(s, r)] = 2 * bs * r + s
            where[(s, n - 1 - r)] = 2 * bs * r + bs + s
    reverse_len = [blocks[s][b] for r in range(cp_size) for b in (r, n - 1 - r) for s in range(bs)]
    return {"split_list": [x for blk in blocks for x in blk],
            "cp_reverse_index": [where[(s, b)] for s in range(bs) for b in range(n)],
            "reverse_split_len": reverse_len,
            "per_rank_logical_token": [sum(blk[r] + blk[n - 1 - r] for blk in blocks) for r in range(cp_size)],
            "total_seq_lens": sum(extend_lens)}


def expected_fields(g: RankGeometry, padded: bool = True) -> dict:
    """Every canonical field of rank ``g.rank`` (see the module docstring), None for all of them when the
    batch is not CP-eligible. ``padded``: the dump was taken after ``pad_logical_token_to_physical``
    (it holds a non-null ``per_rank_logical_token``): ``per_rank_actual_token`` and ``max_rank_len`` are
    then every rank's padded row count ``g.tokens_padded``; else the logical counts and their maximum."""
    base = g.to_json()
    if not g.eligible or g.cp_size == 1:
        return {k: (base["eligible"] if k == "eligible" else None) for k in CANONICAL}
    lay = batch_layout(g.extend_lens, g.cp_size)
    logical = lay["per_rank_logical_token"]
    n, bs, r = 2 * g.cp_size, g.bs, g.rank
    out = {
        "eligible": True,
        "actual_seq_q_prev": list(g.actual_seq_q_prev), "actual_seq_q_next": list(g.actual_seq_q_next),
        "kv_len_prev": list(g.kv_len_prev), "kv_len_next": list(g.kv_len_next),
        "actual_seq_q_combined": g.actual_seq_q_combined, "kv_len_combined": g.kv_len_combined,
        "cu_seqlens_q_prev": g.cu_seqlens_q_prev, "cu_seqlens_q_next": g.cu_seqlens_q_next,
        "cu_seqlens_kv_prev": g.cu_seqlens_kv_prev, "cu_seqlens_kv_next": g.cu_seqlens_kv_next,
        "cu_seqlens_q_combined": g.cu_seqlens_q_combined, "cu_seqlens_kv_combined": g.cu_seqlens_kv_combined,
        "max_seqlen_q_prev": g.max_seqlen_q_prev, "max_seqlen_q_next": g.max_seqlen_q_next,
        "max_seqlen_q_combined": g.max_seqlen_q_combined,
        "total_q_prev_tokens": sum(g.actual_seq_q_prev), "total_q_next_tokens": sum(g.actual_seq_q_next),
        "tokens_padded": g.tokens_padded,
        "zigzag_index": [r + n * s for s in range(bs)] + [n - 1 - r + n * s for s in range(bs)],
        "split_list": lay["split_list"], "cp_reverse_index": lay["cp_reverse_index"],
        "reverse_split_len": lay["reverse_split_len"], "total_seq_lens": lay["total_seq_lens"], "bs": bs,
        "per_rank_logical_token": logical if padded else None,
        "per_rank_actual_token": [g.tokens_padded] * g.cp_size if padded else logical,
        "max_rank_len": [g.tokens_padded if padded else max(logical)] * g.cp_size,
    }
    return out


def table_expectations(g: RankGeometry, tables: dict) -> dict:
    """What each page table of a dump must be, from the tables it holds and the batch: ``{name: expected}``
    with an expected value for each table that can be derived, None for one that cannot (its source table
    is missing).

    * ``page_table`` [bs, W]: its row count must be bs (its entries are engine page ids: only
      ``len(rows)`` is compared, expected ``bs``);
    * ``swa_page_table``: SGLang sizes the SWA pool's table like the full one (``[bs, W]``): its shape,
      ``[rows, columns]``, must equal the page table's;
    * ``zigzag_page_table`` / ``zigzag_swa_page_table`` [2*bs, W]: fused segment ``i`` (prev blocks of
      requests 0..bs-1, then next blocks) reads row ``i``, which must be its request's row of the base
      table: ``cat(t, t)``.
    """
    out: dict = {}
    segments = [s.request for s in g.prev_segments()] + [s.request for s in g.next_segments()] \
        if g.eligible and g.cp_size > 1 else None
    base = tables.get("page_table")
    if "page_table" in tables:
        out["page_table"] = g.bs
    if "swa_page_table" in tables:
        out["swa_page_table"] = _shape(base) if base is not None and len(base) == g.bs else None
    for dup, src in (("zigzag_page_table", "page_table"), ("zigzag_swa_page_table", "swa_page_table")):
        if dup in tables:
            t = tables.get(src)
            out[dup] = [t[s] for s in segments] if t is not None and segments is not None and \
                len(t) == g.bs else None
    return out


def table_unchecked(name: str, tables: dict, bs: int) -> str:
    """Why :func:`table_expectations` derived no value for the duplicated table ``name`` (or the SWA table):
    its source table is missing, or has a wrong shape (the source is then reported as a difference)."""
    src = "swa_page_table" if name == "zigzag_swa_page_table" else "page_table"
    t = tables.get(src)
    if t is None:
        return f"its source table {src} is null in the dump" if src in tables else \
            "its source table is not in the dump"
    return f"its source table {src} has a wrong shape: {_rows(len(t))}, expected bs = {bs}"


def table_difference(name: str, got, exp) -> str:
    """``engine ..., cpbench ...`` for a table that differs: a wrong shape says so (expected vs got), equal
    shapes show both tables; a table that is null in the dump reads ``engine null, cpbench ...`` as any
    other null field does."""
    if got is None and name == "page_table":
        return f"engine null, cpbench expects {_rows(exp)} (one per request: [bs, W])"
    if got is None and name == "swa_page_table":
        return f"engine null, cpbench expects {exp} (page_table's [rows, columns])"
    if got is None:
        return f"engine null, cpbench {_short(exp)}"
    if name == "page_table":
        return f"wrong shape: engine {_rows(got)}, cpbench expects {exp} (one per request: [bs, W])"
    if name == "swa_page_table":
        return f"wrong shape: engine {got}, cpbench expects {exp} (page_table's [rows, columns])"
    if _shape(got) != _shape(exp):
        return f"wrong shape: engine {_shape(got)}, cpbench expects {_shape(exp)} ([2*bs, W]: its source table twice)"
    return f"engine {_short(got)}, cpbench {_short(exp)}"


def _rows(n: int) -> str:
    return f"{n} row{'' if n == 1 else 's'}"


def _short(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 200 else text[:197] + "..."


def table_value(name: str, value):
    """The part of a dumped table that :func:`table_expectations` compares (rows, shape, or the rows); None
    for a table that is null in the dump."""
    if value is None:
        return None
    if name == "page_table":
        return len(value)
    if name == "swa_page_table":
        return _shape(value)
    return value


def _shape(t) -> list[int]:
    return [len(t), len(t[0]) if len(t) else 0]
