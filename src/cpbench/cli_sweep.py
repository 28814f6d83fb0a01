"""`cpbench sweep` orchestration: run directory, progress bar, runner, final table, exit code."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from cpbench.bench.results import critical_path
from cpbench.bench.sweep import Sweep, make_config
from cpbench.cli_options import err_console


def run_sweep(*, out, resume, report, allow_mismatch, console: Console, backend: str, group=None, **kw) -> int:
    """Run a sweep with a progress bar; return the exit code (0 ok, 1 mismatch, 2 nothing could run).

    Raises CpbenchInputError for bad input found before anything is measured.
    """
    if "seq_lens" in kw:
        kw["extend_lens"] = kw.pop("seq_lens")
    cfg = make_config(backend, **kw)
    sweep = Sweep.open(cfg, out, resume, group)
    try:
        return _run(sweep, console, report, allow_mismatch)
    finally:
        sweep.close()


def _run(sweep: Sweep, console: Console, report: bool, allow_mismatch: bool) -> int:
    cfg, run_dir = sweep.cfg, sweep.run_dir
    writer = run_dir is not None
    if writer:
        env = run_dir.read_manifest()
        console.print(f"[bold]cpbench sweep[/] {cfg.model.name} on {env.get('gpu_name') or env.get('cpu')} "
                      f"backend [cyan]{cfg.backend}[/] -> {run_dir}"
                      + (f" (resuming, {sweep.resumed_rows} rows on disk)" if sweep.resumed_rows else ""))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False, disable=not writer) as bar:
        task = bar.add_task("ranks", total=sweep.total_ranks())
        sweep.run(on_cell=lambda c: bar.update(task, description=c.label()), on_rank=lambda: bar.advance(task))
    df = sweep.finish()
    if not writer:
        return 0
    show_summary(console, df)
    if report:
        _write_report(run_dir.path, console)
    console.print(f"run directory: {run_dir}")
    code, message = sweep.exit_code(df, allow_mismatch)
    if code == 2:
        err_console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    elif code == 1:
        console.print(f"[red]{escape(message)}[/]")
    return code


def _write_report(run_dir, console: Console) -> None:
    from cpbench.plots.report import write_report

    path = write_report(run_dir)
    console.print(f"report: {path}")


def _ms(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x / 1e3:.3f}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def show_summary(console: Console, df) -> None:
    """Rich table per cp_size: critical-path two-call ms, fused ms, speedup, status."""
    cp = critical_path(df)
    if cp.empty:
        return
    for (cp_size, backend, timing), g in cp.groupby(["cp_size", "backend", "timing"], sort=True):
        t = Table(title=f"cp_size {cp_size}, {backend}, {timing}: critical path (slowest rank)")
        for col in ("bs", "seq", "two-call ms", "fused ms", "speedup", "status"):
            t.add_column(col, justify="right")
        for _, r in g.sort_values(["bs", "seq_len"]).iterrows():
            sp = r["speedup"]
            t.add_row(str(r["bs"]), str(r["seq_len"]), _ms(r["two_call_us"]), _ms(r["fused_us"]),
                      "-" if sp != sp else f"{sp:.2f}x", r["status"] if r["status"] == "ok" else
                      f"{r['status']}: {escape(_clip(str(r['reason']), 120))}")
        console.print(t)
