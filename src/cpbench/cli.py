"""cpbench command line: wiring, progress and exit codes only (logic lives in bench/, profiles/, plots/).

Exit codes: 0 ok; 1 a measured problem (mismatch, regression); 2 bad input (one line on stderr).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from cpbench.errors import CpbenchInputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark and profile zigzag context-parallel prefill attention: fused (SGLang PR #33137) "
         "vs two-call, per rank, on real kernels.",
    epilog="Examples:  cpbench sweep --cp 4 --bs 1,4,16   |   cpbench geometry --cp 4 --extend 11,13 "
           "--prefix 8,14   |   cpbench profile --cp 4 --bs 1 --seq 8192   |   cpbench report runs/<id>",
)
console = Console()
if not console.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
    console.width = 160
err_console = Console(stderr=True)


def int_list(text: str, what: str, minimum: int = 1) -> list[int]:
    """Parse ``"1,4,16"`` into ints >= minimum; raise CpbenchInputError naming the option."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise CpbenchInputError(f"{what} is empty: give a comma-separated list such as 1,4,16")
    try:
        vals = [int(t) for t in items]
    except ValueError:
        raise CpbenchInputError(f"{what} must be comma-separated integers, got {text!r}") from None
    bad = [v for v in vals if v < minimum]
    if bad:
        raise CpbenchInputError(f"{what} values must be >= {minimum}, got {bad[0]}")
    return vals


# ------------------------------------------------------------------------------------------------
# geometry / models
# ------------------------------------------------------------------------------------------------
@app.command()
def geometry(
    cp: Annotated[int, typer.Option("--cp", help="CP size (cp_size).")] = 4,
    extend: Annotated[str, typer.Option(help="Extend (new-token) lengths per request, e.g. 11,13.")] = "11,13",
    prefix: Annotated[Optional[str], typer.Option(help="Cached prefix lengths per request, e.g. 8,14.")] = None,
    rank: Annotated[Optional[int], typer.Option(help="Only this rank (default: every rank).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per rank.")] = False,
) -> None:
    """Print each rank's zigzag metadata (SGLang field names) for a batch, to check an engine's own."""
    from cpbench.bench.geometry import rank_geometry, validate_batch

    ext = int_list(extend, "--extend")
    pre = int_list(prefix, "--prefix", minimum=0) if prefix is not None else None
    validate_batch(ext, pre, cp, rank)
    ranks = [rank] if rank is not None else list(range(cp))
    geoms = [rank_geometry(ext, pre, cp, r) for r in ranks]
    if as_json:
        print(json.dumps([g.to_json() for g in geoms]))
        return
    g0 = geoms[0]
    if not g0.eligible:
        console.print(f"[yellow]not CP-eligible:[/] {g0.reason}")
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


@app.command()
def models() -> None:
    """List the model presets (attention shape per CP rank, attention TP 1)."""
    from cpbench.bench.models import PRESETS

    t = Table(title="model presets")
    for col in ("name", "layers", "q heads", "kv heads", "head_dim", "window", "sinks", "page_size"):
        t.add_column(col)
    for m in PRESETS.values():
        t.add_row(m.name, str(m.num_layers), str(m.num_q_heads), str(m.num_kv_heads), str(m.head_dim),
                  f"{m.sliding_window}/full alt."
                  if m.sliding_window else "full", "fp32" if m.has_sinks else "-",
                  str(m.page_size))
    console.print(t)

from cpbench import cli_report  # noqa: E402  (plot / report / compare)
cli_report.register(app)


def main() -> None:
    """Entry point: run the app, turning input errors into one line on stderr and exit code 2."""
    try:
        app(standalone_mode=True)
    except CpbenchInputError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(2)
