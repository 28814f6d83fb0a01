"""`cpbench sweep` orchestration: run directory, progress bar, runner, final table, exit code."""

from __future__ import annotations

import dataclasses
import json
import math
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from cpbench.bench.backends import get_backend, resolve_auto
from cpbench.bench.env import environment
from cpbench.bench.geometry import eligibility
from cpbench.bench.results import append_row, critical_path, read_jsonl, read_manifest
from cpbench.bench.rundir import RESULTS, done_keys, finalize, open_run_dir, record_wall_time, write_manifest
from cpbench.bench.runner import Runner, SweepConfig, cpu_tflop_limit, plan_cells
from cpbench.cli_options import err_console
from cpbench.errors import CpbenchInputError


def run_sweep(*, out, resume, report, allow_mismatch, console: Console, backend: str, **kw) -> int:
    """Run a sweep; return the exit code (0 ok, 1 mismatch, 2 nothing could run).

    Raises CpbenchInputError for bad input found before anything is measured.
    """
    t0 = time.monotonic()
    name = resolve_auto(kw["device"]) if backend == "auto" else backend
    get_backend(name)  # unknown names fail here, before a directory is made
    cfg = SweepConfig(backend=name, **kw)
    cells = plan_cells(cfg)
    if cfg.device.type == "cpu":
        cpu_tflop_limit()  # a bad CPBENCH_CPU_TFLOP_LIMIT fails here, before a directory is made
    if not any(eligibility(c.extend_lens, c.cp_size)[0] for c in cells):
        c = cells[0]
        raise CpbenchInputError(f"no cell can run: {eligibility(c.extend_lens, c.cp_size)[1]} "
                                f"(every batch needs extend lengths >= 2*cp_size)")
    run_dir = open_run_dir(out, resume)
    if resume:
        check_resume_config(run_dir, cfg)
    done = done_keys(run_dir)
    rows_path = run_dir / RESULTS
    runner = Runner(cfg, lambda row: append_row(rows_path, row), done)
    env = environment(cfg.device)
    config = {k: (v.name if k == "model" else str(v) if k == "device" else v)
              for k, v in dataclasses.asdict(cfg).items() if k != "model"}
    config["model"] = dataclasses.asdict(cfg.model)
    write_manifest(run_dir, {**env, "timing_method": timing_method(cfg, runner.cpu_threads)}, config)
    record_wall_time(run_dir, time.monotonic() - t0, new_entry=True)
    console.print(f"[bold]cpbench sweep[/] {cfg.model.name} on {env.get('gpu_name') or env['cpu']} "
                  f"backend [cyan]{name}[/] -> {run_dir}" + (f" (resuming, {len(done)} rows on disk)" if done else ""))
    total = sum(len(cfg.ranks or range(c.cp_size)) for c in cells)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        task = bar.add_task("ranks", total=total)
        for c in cells:
            bar.update(task, description=c.label())
            runner.run_cell(c, on_rank=lambda: bar.advance(task))
            record_wall_time(run_dir, time.monotonic() - t0)
    df = finalize(run_dir)
    record_wall_time(run_dir, time.monotonic() - t0)
    show_summary(console, df)
    if report:
        _write_report(run_dir, console)
    console.print(f"run directory: {run_dir}")
    if df.empty or not (df["status"].isin(["ok", "mismatch"])).any():
        reasons = sorted(set(df.get("reason", []))) if not df.empty else []
        err_console.print(f"[red]error:[/] no cell could run: {escape('; '.join(map(str, reasons))[:300])}",
                          soft_wrap=True)
        return 2
    if runner.mismatches and not allow_mismatch:
        console.print(f"[red]{runner.mismatches} row(s) failed the correctness check[/] (--allow-mismatch to accept)")
        return 1
    return 0


# Options that change what a row means; a resumed sweep must keep them (lists of cells may grow).
FIXED_ON_RESUME = ("backend", "dtype", "seed", "prefix", "context_len", "check", "model")


def check_resume_config(run_dir, cfg: SweepConfig) -> None:
    """Raise CpbenchInputError when --resume would mix rows measured under other options."""
    old = read_manifest(run_dir / "manifest.json").get("config", {})
    new = {"model": dataclasses.asdict(cfg.model), **{k: getattr(cfg, k) for k in FIXED_ON_RESUME if k != "model"}}
    for key in FIXED_ON_RESUME:
        if key in old and json.loads(json.dumps(old[key])) != json.loads(json.dumps(new[key])):
            was = old[key].get("name", old[key]) if key == "model" and isinstance(old[key], dict) else old[key]
            raise CpbenchInputError(f"--resume: {run_dir} was measured with a different {key} "
                                    f"({str(was)[:80]}): resume with the same options or pick another --out")
    # The rows themselves, in case the manifest was lost or edited: model (its name carries overrides),
    # backend and dtype must match.
    rows = read_jsonl(run_dir / RESULTS)
    for key, value in (("model", cfg.model.name), ("backend", cfg.backend), ("dtype", cfg.dtype)):
        other = sorted({str(r.get(key)) for r in rows} - {value})
        if other:
            raise CpbenchInputError(f"--resume: {run_dir} holds rows measured with {key} {other[0]!r}, not "
                                    f"{value!r}: resume with the same options or pick another --out")


def timing_method(cfg: SweepConfig, cpu_threads: int | None) -> str:
    clock = "CUDA events" if cfg.device.type == "cuda" else "time.perf_counter"
    return (f"{clock}, one whole forward ({cfg.model.num_layers} layers) per sample, device synchronised "
            f"before each sample; {cfg.warmup} warm-up forwards; ~{cfg.budget_ms:g} ms of samples per variant "
            f"(>= {5 if cfg.device.type == 'cuda' else 3}"
            f"{'' if cpu_threads is None else f', {cpu_threads} CPU thread(s)'}); two-call and fused interleaved ABBA; timings: {', '.join(cfg.timings)} "
            "(graph = CUDA graph replay); setup (metadata, page tables, plan) timed separately on the host")


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
