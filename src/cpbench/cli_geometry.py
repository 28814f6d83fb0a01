"""``cpbench geometry`` (each rank's zigzag metadata) and ``cpbench models`` (the presets); no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cpbench.cli_options import console, int_list
from cpbench.errors import CpbenchInputError

GEOMETRY_EPILOG = ("Examples:  cpbench geometry --cp 4 --extend 11,13 --prefix 8,14  |  "
                   "cpbench geometry --cp 8 --extend 4096 --rank 0 --json  |  "
                   "cpbench geometry --check examples/sglang_cp_metadata_cp4.json")
MODELS_EPILOG = "Examples:  cpbench models  |  cpbench models --tp 8"


def geometry(
    cp: Annotated[Optional[int], typer.Option("--cp", help="CP size (cp_size). Default 4.")] = None,
    extend: Annotated[Optional[str], typer.Option(
        help="Extend (new-token) lengths per request, e.g. 11,13. Default 11,13.")] = None,
    prefix: Annotated[Optional[str], typer.Option(help="Cached prefix lengths per request, e.g. 8,14.")] = None,
    rank: Annotated[Optional[int], typer.Option(help="Only this rank (default: every rank).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per rank.")] = False,
    check: Annotated[Optional[Path], typer.Option(
        "--check", help="An engine's per-rank metadata dump (JSON as --json prints it): print a field-by-field "
                        "diff against cpbench's; exit 1 on a difference.")] = None,
) -> None:
    """Print each rank's zigzag metadata (SGLang field names) for a batch, to check an engine's own."""
    from cpbench.bench.geometry import rank_geometry, validate_batch

    if check is not None:
        raise typer.Exit(_check(check, cp, extend, prefix, rank, as_json))
    cp = 4 if cp is None else cp
    ext = int_list("11,13" if extend is None else extend, "--extend")
    pre = int_list(prefix, "--prefix", minimum=0) if prefix is not None else None
    cp = int_list(str(cp), "--cp")[0]  # the same bounds as sweep's --cp
    validate_batch(ext, pre, cp, rank)
    ranks = [rank] if rank is not None else list(range(cp))
    geoms = [rank_geometry(ext, pre, cp, r) for r in ranks]
    if as_json:
        print(json.dumps([g.to_json() for g in geoms]))
        return
    g0 = geoms[0]
    if not g0.eligible:
        console.print(f"[yellow]not CP-eligible:[/] {escape(g0.reason)}")
        return
    t = Table(title=f"zigzag geometry: cp_size {cp}, extend {ext}, prefix {list(g0.prefix_lens)}; "
                    f"rows per rank padded to {g0.tokens_padded}")
    for col in ("rank", "q_prev", "q_next", "kv_len_prev", "kv_len_next", "cu_seqlens_q_combined",
                "cu_seqlens_kv_combined", "max_q", "tokens"):
        t.add_column(col, justify="right")
    for g in geoms:
        t.add_row(str(g.rank), str(list(g.actual_seq_q_prev)), str(list(g.actual_seq_q_next)),
                  str(list(g.kv_len_prev)), str(list(g.kv_len_next)), str(g.cu_seqlens_q_combined),
                  str(g.cu_seqlens_kv_combined), str(g.max_seqlen_q_combined), str(g.tokens_logical))
    console.print(t)


def _check(path: Path, cp: Optional[int], extend: Optional[str], prefix: Optional[str], rank: Optional[int],
           as_json: bool) -> int:
    """``geometry --check``: 0 when every field of the dump matches, 1 on a difference (CpbenchInputError,
    exit 2, for a malformed dump or options that clash with it)."""
    from cpbench.bench.geometry_check import diff_dump, load_dump

    if as_json or rank is not None:
        raise CpbenchInputError("--check compares every rank of the dump and prints a diff: drop --json and --rank")
    dump = load_dump(path)
    if dump.cp_size is not None:
        if cp is not None or extend is not None or prefix is not None:
            raise CpbenchInputError(f"{str(path)!r} gives the batch (cp_size, extend_seq_lens): drop --cp, --extend "
                                    "and --prefix")
        cp, ext, pre = dump.cp_size, dump.extend_lens, dump.prefix_lens
    else:
        cp = 4 if cp is None else int_list(str(cp), "--cp")[0]
        ext = int_list("11,13" if extend is None else extend, "--extend")
        pre = int_list(prefix, "--prefix", minimum=0) if prefix is not None else None
    diffs, n = diff_dump(dump, ext, pre, cp)
    ranks = ", ".join(str(r["rank"]) for r in sorted(dump.ranks, key=lambda r: r["rank"]))
    head = f"cp_size {cp}, extend {list(ext)}, prefix {list(pre) if pre else [0] * len(ext)}; ranks {ranks}"
    if not diffs:
        console.print(f"match: {n} field(s) agree ({escape(head)})")
        return 0
    console.print(f"[red]{len(diffs)} of {n} field(s) differ[/] ({escape(head)}):")
    for line in diffs:
        console.print("  " + escape(line), soft_wrap=True)
    return 1


def models(tp: Annotated[int, typer.Option("--tp", help="Show one GPU's heads at this attention TP.")] = 1) -> None:
    """List the model presets (attention shape per CP rank and GPU, attention TP 1 or --tp)."""
    from cpbench.bench.models import PRESETS
    from cpbench.bench.tp import split_heads

    t = Table(title="model presets" + (f" (one GPU's heads at tp_size {tp})" if tp != 1 else ""))
    for col in ("name", "layers", "q heads", "kv heads", "head_dim", "window", "sinks", "page_size"):
        t.add_column(col)
    for m in (split_heads(p, tp) for p in PRESETS.values()):
        t.add_row(m.name, str(m.num_layers), str(m.num_q_heads), str(m.num_kv_heads), str(m.head_dim),
                  f"{m.sliding_window}/full alt."
                  if m.sliding_window else "full", "fp32" if m.has_sinks else "-",
                  str(m.page_size))
    console.print(t)
