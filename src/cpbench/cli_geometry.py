"""``cpbench geometry`` (each rank's zigzag metadata), ``cpbench models`` (the presets) and ``cpbench columns``
(the results columns); no torch."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cpbench.cli_options import console, int_list
from cpbench.cli_tables import Col, print_table

GEOMETRY_EPILOG = ("Examples:  cpbench geometry --cp 4 --extend-lens 11,13 --prefix-lens 8,14  |  "
                   "cpbench geometry --cp 8 --extend-lens 4096 --ranks 0 --json")
MODELS_EPILOG = "Example:  cpbench models"
COLUMNS_EPILOG = "Examples:  cpbench columns  |  cpbench columns --json"


def geometry(
    cp: Annotated[int, typer.Option("--cp", help="CP size (cp_size).")] = 4,
    extend: Annotated[str, typer.Option(
        "--extend-lens", "--extend", help="Extend (new-token) lengths, one per request, e.g. 11,13 (SGLang extend_lens).")] = "11,13",
    prefix: Annotated[Optional[str], typer.Option(
        "--prefix-lens", "--prefix", help="Cached prefix tokens: one per request (e.g. 8,14), or one value for "
                                          "every request (SGLang prefix_lens).")] = None,
    rank: Annotated[Optional[str], typer.Option(
        "--ranks", "--rank", help="Only these ranks, e.g. 0 or 0,3 (default: every rank).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per rank.")] = False,
) -> None:
    """Print each rank's zigzag metadata (SGLang field names) for a batch, to check an engine's own."""
    from cpbench.bench.geometry import rank_geometry, validate_batch

    ext = int_list(extend, "--extend-lens")
    pre = int_list(prefix, "--prefix-lens", minimum=0) if prefix is not None else None
    if pre is not None and len(pre) == 1 and len(ext) > 1:
        pre = pre * len(ext)  # one prefix for every request, as sweep's --prefix-len
    cp = int_list(str(cp), "--cp")[0]  # the same bounds as sweep's --cp
    ranks = int_list(rank, "--ranks", minimum=0) if rank is not None else list(range(cp))
    for r in ranks:
        validate_batch(ext, pre, cp, r)
    geoms = [rank_geometry(ext, pre, cp, r) for r in ranks]
    if as_json:
        print(json.dumps([g.to_json() for g in geoms]))
        return
    g0 = geoms[0]
    if not g0.eligible:
        console.print(f"[yellow]not CP-eligible:[/] {escape(g0.reason)}")
        return
    cols = [Col(h) for h in ("rank", "q_prev", "q_next", "kv_len_prev", "kv_len_next", "cu_seqlens_q_combined",
                             "cu_seqlens_kv_combined", "max_q", "tokens")]
    rows = [[str(g.rank), str(list(g.actual_seq_q_prev)), str(list(g.actual_seq_q_next)), str(list(g.kv_len_prev)),
             str(list(g.kv_len_next)), str(g.cu_seqlens_q_combined), str(g.cu_seqlens_kv_combined),
             str(g.max_seqlen_q_combined), str(g.tokens_logical)] for g in geoms]
    print_table(console, f"zigzag geometry: cp_size {cp}, extend_lens {ext}, prefix_lens {list(g0.prefix_lens)}; "
                         f"rows per rank padded to {g0.tokens_padded}", cols, rows)


def models() -> None:
    """List the model presets (attention shape per CP rank, attention TP 1)."""
    from cpbench.bench.models import PRESETS

    rows = [[m.name, str(m.num_layers), str(m.num_q_heads), str(m.num_kv_heads), str(m.head_dim),
             f"{m.sliding_window}/full alt." if m.sliding_window else "full", "fp32" if m.has_sinks else "-",
             str(m.page_size)] for m in PRESETS.values()]
    print_table(console, "model presets", [Col("name", left=True), Col("layers"), Col("q heads"), Col("kv heads"),
                                           Col("head_dim"), Col("window", left=True), Col("sinks", left=True),
                                           Col("page_size")], rows)


def columns(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per column.")] = False,
) -> None:
    """List every column of results.jsonl / .parquet / .csv: name, type, unit, what it holds."""
    from dataclasses import asdict

    from cpbench.bench.schema import COLUMNS, SCHEMA_VERSION

    if as_json:
        print(json.dumps([asdict(c) for c in COLUMNS.values()]))
        return
    rows = [[c.name, c.type, c.unit or "-", c.doc] for c in COLUMNS.values()]
    print_table(console, f"results columns (schema {SCHEMA_VERSION})",
                [Col("name", left=True), Col("type", number=False), Col("unit", number=False),
                 Col("what it holds", number=False)], rows)
