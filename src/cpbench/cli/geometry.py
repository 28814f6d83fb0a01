"""``cpbench geometry`` (each rank's zigzag metadata), ``cpbench models`` (the presets) and ``cpbench columns``
(the results columns); no torch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cpbench.cli.options import CpMinExtendOpt, CpMinTokensOpt, console, int_list
from cpbench.cli.tables import Col, print_table
from cpbench.domain.jsonfile import dumps
from cpbench.errors import CpbenchInputError

GEOMETRY_EPILOG = ("Examples:  cpbench geometry --cp 4 --extend-lens 11,13 --prefix-lens 8,14  |  "
                   "cpbench geometry --cp 8 --extend-lens 4096 --ranks 0 --json  |  "
                   "cpbench geometry --check examples/sglang_dump_cp4")
MODELS_EPILOG = "Examples:  cpbench models  |  cpbench models --tp 8"
COLUMNS_EPILOG = "Examples:  cpbench columns  |  cpbench columns --json"


def geometry(
    cp: Annotated[Optional[int], typer.Option("--cp", help="CP size (cp_size). Default 4.")] = None,
    extend: Annotated[Optional[str], typer.Option(
        "--extend-lens", "--extend", help="Extend (new-token) lengths, one per request, e.g. 11,13 (SGLang "
                                          "extend_lens). Default 11,13.")] = None,
    prefix: Annotated[Optional[str], typer.Option(
        "--prefix-lens", "--prefix", help="Cached prefix tokens: one per request (e.g. 8,14), or one value for "
                                          "every request (SGLang prefix_lens).")] = None,
    rank: Annotated[Optional[str], typer.Option(
        "--ranks", "--rank", help="Only these ranks, e.g. 0 or 0,3 (default: every rank).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per rank.")] = False,
    cp_min_extend: CpMinExtendOpt = "pr",
    cp_min_tokens: CpMinTokensOpt = 0,
    check: Annotated[Optional[Path], typer.Option(
        "--check", help="An engine's CP metadata dump: SGLang's ZigzagContextParallelMetadata as one rank's "
                        "JSON, a directory of them, or the list --json prints (docs/sglang-dump.md). Prints "
                        "'all N fields agree' or the first difference (exit 1).")] = None,
) -> None:
    """Print each rank's zigzag metadata (SGLang field names) for a batch, to check an engine's own."""
    from cpbench.domain.eligibility import parse_rule
    from cpbench.domain.geometry import rank_geometry, validate_batch

    rule = parse_rule(cp_min_extend, cp_min_tokens)
    if check is not None:
        raise typer.Exit(_check(check, cp, extend, prefix, rank, as_json, rule))
    cp = 4 if cp is None else cp
    ext = int_list("11,13" if extend is None else extend, "--extend-lens")
    pre = int_list(prefix, "--prefix-lens", minimum=0) if prefix is not None else None
    if pre is not None and len(pre) == 1 and len(ext) > 1:
        pre = pre * len(ext)  # one prefix for every request, as sweep's --prefix-len
    cp = int_list(str(cp), "--cp")[0]  # the same bounds as sweep's --cp
    ranks = list(dict.fromkeys(int_list(rank, "--ranks", minimum=0))) if rank is not None else list(range(cp))
    for r in ranks:
        validate_batch(ext, pre, cp, r)
    geoms = [rank_geometry(ext, pre, cp, r, rule) for r in ranks]
    if as_json:
        print(dumps([g.to_json() for g in geoms]))
        return
    g0 = geoms[0]
    if cp == 1:
        console.print(f"[yellow]{escape(g0.reason)}[/]")
        return
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


def _check(path: Path, cp: Optional[int], extend: Optional[str], prefix: Optional[str], rank: Optional[str],
           as_json: bool, rule) -> int:
    """``geometry --check``: 0 when every compared field of the dump agrees ("all N fields agree"), 1 on a
    difference (the first one, its value in both, and how many differ); CpbenchInputError (exit 2) for a
    malformed dump, a missing input (the prefix lengths) or options that clash with it."""
    from cpbench.domain.geometry_check import diff_dump, load_dump, resolve_batch, shown

    if as_json or rank is not None:
        raise CpbenchInputError("--check compares every rank of the dump and prints a diff: drop --json and --ranks")
    dump = load_dump(path)
    batch = resolve_batch(dump, int_list(str(cp), "--cp")[0] if cp is not None else None,
                          int_list(extend, "--extend-lens") if extend is not None else None,
                          int_list(prefix, "--prefix-lens", minimum=0) if prefix is not None else None)
    res = diff_dump(dump, batch, rule)
    ranks = shown(sorted(r["rank"] for r in dump.ranks))[1:-1]
    head = (f"cp_size {batch.cp_size}, extend {shown(batch.extend_lens)}"
            + (f" (the last padded by {batch.padded_by} of num_tokens)" if batch.padded_by else "")
            + f", prefix {shown(batch.prefix_lens) if batch.prefix_lens is not None else 'not given'}; ranks {ranks}; "
            + rule.describe())
    if res.not_checked:
        by_why: dict[str, list[str]] = {}
        for k, why in res.not_checked.items():
            by_why.setdefault(why, []).append(k)
        for why, keys in by_why.items():
            console.print(f"not checked ({why}): {escape(', '.join(keys))}", soft_wrap=True)
    if not res.differences:
        console.print(f"all {res.compared} fields agree ({escape(head)})", soft_wrap=True)
        return 0
    console.print(f"[red]first difference:[/] {escape(res.differences[0])}", soft_wrap=True)
    console.print(f"{len(res.differences)} of {res.compared} fields differ ({escape(head)})", soft_wrap=True)
    return 1


def models(tp: Annotated[int, typer.Option("--tp", help="Show one GPU's heads at this attention TP.")] = 1) -> None:
    """List the model presets (attention shape per CP rank and GPU, attention TP 1 or --tp)."""
    from cpbench.domain.models import PRESETS
    from cpbench.domain.tp import split_heads

    rows = [[m.name, str(m.num_layers), str(m.num_q_heads), str(m.num_kv_heads), str(m.head_dim),
             f"{m.sliding_window}/full alt." if m.sliding_window else "full", "fp32" if m.has_sinks else "-",
             str(m.page_size)] for m in (split_heads(p, tp) for p in PRESETS.values())]
    title = "model presets" + (f" (one GPU's heads at tp_size {tp})" if tp != 1 else "")
    print_table(console, title, [Col("name", left=True), Col("layers"), Col("q heads"), Col("kv heads"),
                                 Col("head_dim"), Col("window", left=True), Col("sinks", left=True),
                                 Col("page_size")], rows)


def columns(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per column.")] = False,
) -> None:
    """List every column of results.jsonl / .parquet / .csv: name, type, unit, what it holds."""
    from dataclasses import asdict

    from cpbench.kernels.backends.registry import BACKEND_NAMES
    from cpbench.results.schema import COLUMNS, SCHEMA_VERSION

    units = {"backend": " | ".join(BACKEND_NAMES)}  # the registry's names, whatever the schema's text says
    if as_json:
        print(dumps([{**asdict(c), "unit": units.get(c.name, c.unit)} for c in COLUMNS.values()]))
        return
    rows = [[c.name, c.type, units.get(c.name, c.unit or "-"), c.doc] for c in COLUMNS.values()]
    print_table(console, f"results columns (schema {SCHEMA_VERSION})",
                [Col("name", left=True), Col("type", number=False), Col("unit", number=False),
                 Col("what it holds", number=False)], rows)
