"""cpbench command line: wiring, progress and exit codes only (logic lives in bench/, profiles/, plots/).

Exit codes: 0 ok; 1 a measured problem (mismatch, regression); 2 bad input (one line on stderr).
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cpbench.cli_options import (BackendName, DeviceOpt, DType, HeadDimOpt, HeadsOpt, KvHeadsOpt, LayersOpt,
                                 ModelConfigOpt, ModelOpt, PageSizeOpt, SinksOpt, WindowOpt, choice_list, console,
                                 MAX_TOKENS, check_seq_lens, err_console, int_list, resolve_device, resolve_model)
from cpbench.errors import CpbenchInputError, CpbenchWarning, one_line

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep torch.profiler's per-step log lines off the terminal

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark and profile zigzag context-parallel prefill attention: fused (SGLang PR #33137) "
         "vs two-call, per rank, on real kernels.",
    epilog="Examples:  cpbench sweep --cp 4 --bs 1,4,16   |   cpbench geometry --cp 4 --extend 11,13 "
           "--prefix 8,14   |   cpbench profile --cp 4 --bs 1 --seq 8192   |   cpbench report runs/<id>",
)


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



SWEEP_EPILOG = ("Examples:  cpbench sweep --cp 4 --bs 1,4,16  |  cpbench sweep --cp 2,4,8 --bs 1 --seq 8192,32768 "
                "--timing eager  |  cpbench sweep --seq-lens 3000,8192 --prefix 512 --backend fa2  |  "
                "cpbench sweep --out runs/a --resume")


@app.command(epilog=SWEEP_EPILOG)
def sweep(
    cp: Annotated[str, typer.Option("--cp", help="cp_size values, e.g. 2,4,8.")] = "4",
    bs: Annotated[Optional[str], typer.Option("--bs", help="Batch sizes (requests), e.g. 1,4,16. Default: 1,4,16.")] = None,
    seq: Annotated[Optional[str], typer.Option(
        "--seq", help="Extend lengths per request (tokens). Default: 2048,8192,16384 on a GPU, 32,64 on CPU.")] = None,
    seq_lens: Annotated[Optional[str], typer.Option(
        "--seq-lens", help="One explicit heterogeneous batch instead of --bs x --seq, e.g. 3000,5000.")] = None,
    prefix: Annotated[int, typer.Option("--prefix", help="Cached prefix tokens per request.")] = 0,
    ranks: Annotated[str, typer.Option("--ranks", help="'all' or a list of ranks, e.g. 0,3.")] = "all",
    mode: Annotated[str, typer.Option("--mode", help="two-call, fused, or both.")] = "two-call,fused",
    backend: Annotated[BackendName, typer.Option("--backend", help="Attention backend.")] = BackendName.auto,
    timing: Annotated[Optional[str], typer.Option(
        "--timing", help="eager, graph or both (default: both on CUDA, eager on CPU).")] = None,
    budget_ms: Annotated[float, typer.Option("--budget-ms", help="Time budget per timed variant, ms.")] = 200.0,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", help="Untimed forwards before timing (default 3 on CUDA, 1 on CPU).")] = None,
    dtype: Annotated[DType, typer.Option("--dtype", help="q/k/v dtype.")] = DType.bf16,
    seed: Annotated[int, typer.Option("--seed", help="Seed of inputs and page-table permutation.")] = 0,
    context_len: Annotated[Optional[int], typer.Option(
        "--context-len", help="Tokens the page table is sized for (W = ceil(context_len/page_size)); default: longest sequence.")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Run directory (default runs/<timestamp>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out, skipping measured rows.")] = False,
    check: Annotated[bool, typer.Option("--check/--no-check", help="Compare outputs with the fp32 torch reference.")] = True,
    allow_mismatch: Annotated[bool, typer.Option("--allow-mismatch", help="Exit 0 even if a check fails.")] = False,
    profile: Annotated[bool, typer.Option("--profile/--no-profile", help="Count kernels per forward (torch.profiler).")] = True,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write plots and report.md at the end.")] = True,
    nvtx: Annotated[bool, typer.Option(
        "--nvtx", help="NVTX ranges (cell, layer, prev/next/combined) around timed eager forwards, for nsys; "
                       "off by default: ~0.4 µs per range shows in short forwards.")] = False,
    model: ModelOpt = "gpt-oss-120b", model_config: ModelConfigOpt = None, layers: LayersOpt = None,
    heads: HeadsOpt = None, kv_heads: KvHeadsOpt = None, head_dim: HeadDimOpt = None, window: WindowOpt = None,
    sinks: SinksOpt = None, page_size: PageSizeOpt = None, device: DeviceOpt = None,
) -> None:
    """Measure fused vs two-call zigzag CP attention for every cell and rank; write a run directory."""
    from cpbench.cli_sweep import run_sweep

    dev = resolve_device(device)
    spec = resolve_model(model, model_config, layers, heads, kv_heads, head_dim, window, sinks, page_size)
    check_seq_lens(seq_lens, bs, seq)
    explicit = int_list(seq_lens, "--seq-lens") if seq_lens else None
    default_seq = "2048,8192,16384" if dev.type == "cuda" else "32,64"
    if out is not None and not out.strip():
        raise CpbenchInputError("--out is empty: give a directory, or leave it out for runs/<timestamp>")
    if not math.isfinite(budget_ms) or not 0 <= seed < 2**63:
        raise CpbenchInputError("--budget-ms must be a finite number of ms and --seed an integer in [0, 2**63)")
    timings = choice_list(timing if timing is not None else ("eager,graph" if dev.type == "cuda" else "eager"),
                          ("eager", "graph"), "--timing")
    if "graph" in timings and dev.type != "cuda":
        raise CpbenchInputError("--timing graph needs a CUDA device: use --timing eager on CPU")
    warmup = (3 if dev.type == "cuda" else 1) if warmup is None else warmup
    if budget_ms <= 0 or warmup < 0:
        raise CpbenchInputError("--budget-ms must be > 0 and --warmup >= 0")
    if not 0 <= prefix <= MAX_TOKENS:
        raise CpbenchInputError(f"--prefix must be in [0, {MAX_TOKENS}] tokens, got {prefix}")
    seqs = int_list(default_seq if seq is None else seq, "--seq")
    if context_len is not None and context_len < max(explicit or seqs) + prefix:
        raise CpbenchInputError(f"--context-len {context_len} is shorter than the longest sequence "
                                f"({max(explicit or seqs) + prefix} tokens with prefix): raise it or drop it")
    cps = int_list(cp, "--cp")
    rank_list = None if ranks.strip() == "all" else int_list(ranks, "--ranks", minimum=0)
    if rank_list and max(rank_list) >= min(cps):
        raise CpbenchInputError(f"--ranks {max(rank_list)} is outside [0, cp_size) for cp_size {min(cps)}")
    code = run_sweep(
        model=spec, cp_sizes=cps, bs_list=int_list("1,4,16" if bs is None else bs, "--bs"), seq_list=seqs,
        seq_lens=explicit, prefix=prefix, ranks=rank_list, modes=choice_list(mode, ("two-call", "fused"), "--mode"),
        backend=backend.value, timings=timings, budget_ms=budget_ms, warmup=warmup, dtype=dtype.value, seed=seed,
        check=check, context_len=context_len, device=dev, profile=profile, nvtx=nvtx, out=out, resume=resume,
        report=report, allow_mismatch=allow_mismatch, console=console)
    raise typer.Exit(code)

from cpbench import cli_profile, cli_report  # noqa: E402  (profile, doctor / plot, report, compare)

cli_profile.register(app)
cli_report.register(app)


def _is(e: BaseException, name: str) -> bool:
    # typer >= 0.2x vendors click (typer._click), older typer uses click: match the class by name
    return any(c.__name__ == name for c in type(e).__mro__)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """cpbench's own warnings as one ``warning:`` line; others as Python prints them."""
    if issubclass(category, CpbenchWarning):
        err_console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def main() -> None:
    """Entry point: run the app; bad input (ours or click's) becomes one line on stderr and exit 2."""
    warnings.showwarning = _show_warning
    try:
        code = app(standalone_mode=False)
    except CpbenchInputError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except (OverflowError, MemoryError) as e:  # a size no machine can hold (e.g. --window 1e20)
        err_console.print(f"[bold red]error:[/] a value is too large to run ({escape(one_line(e))}): "
                          "use realistic sizes", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        code = 130
    except (OSError, UnicodeDecodeError) as e:  # a path that is not what it should be (file vs folder, ...)
        err_console.print(f"[bold red]error:[/] {escape(f'{type(e).__name__}: {e}')}: check that path (a file "
                          "where a folder belongs or the reverse, permissions, free space)", highlight=False,
                          soft_wrap=True)
        sys.exit(2)
    except Exception as e:
        if _is(e, "NoArgsIsHelpError"):
            print(e.ctx.get_help() if getattr(e, "ctx", None) else str(e))
            sys.exit(0)
        if _is(e, "UsageError"):  # unknown option/command, bad value, missing argument
            ctx = getattr(e, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            err_console.print(f"[bold red]error:[/] {escape(e.format_message() + where)}", highlight=False,
                              soft_wrap=True)
            sys.exit(2)
        if _is(e, "Abort"):
            err_console.print("aborted")
            sys.exit(130)
        raise
    if code == 130:  # Ctrl-C (typer returns it as exit code 130)
        err_console.print("interrupted: a sweep keeps every row measured so far in results.jsonl; rerun the same "
                          "command with --resume to finish it (without --resume if it had not made its run "
                          "directory yet)", highlight=False, soft_wrap=True)
    sys.exit(code if isinstance(code, int) else 0)
