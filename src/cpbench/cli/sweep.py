"""`cpbench sweep`: the command (options, checks), then the orchestration: run directory, progress bar,
runner, final table, exit code. run/ is imported when a sweep runs, so other commands start without torch."""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cpbench.domain.modes import ALL_MODES, MODES, Mode, Timing, Status, TIMINGS
from cpbench.ranks.launch import under_torchrun
from cpbench.kernels.backends.registry import names_with_mode
from cpbench.cli.cells import batches_of, cells_record, check_out, parse_cells, workload_batches
from cpbench.cli.dist import (DistBackend, DistBackendOpt, DistOptions, DistTimeoutOpt, GatherOpt, Launch,
                              LaunchOpt, NprocOpt, launch_torchrun, run_as_rank)
from cpbench.cli.options import (BACKEND_CHOICES, CpMinExtendOpt, CpMinTokensOpt, DeviceOpt, DType, ExtendLensOpt,
                                 FusedOrderOpt, HeadDimOpt, HeadsOpt, KvHeadsOpt, LayersOpt, ModelConfigOpt,
                                 ModelOpt, PageSizeOpt, PrefixLenOpt, SeqAliasOpt, SeqLensAliasOpt, SinksOpt,
                                 WindowOpt, backend_list, renamed,
                                 choice_list, console, err_console, int_list, resolve_device, resolve_model)
from cpbench.errors import CpbenchInputError, shorten
from cpbench.results.policy import host_bound_text



SWEEP_EPILOG = ("Examples:  cpbench sweep --cp 4 --bs 1,4,16  |  cpbench sweep --cp 2,4,8 --bs 1 --extend-len 8192,32768 "
                "--timing eager  |  cpbench sweep --extend-lens 3000,8192 --prefix-len 512 --backend flashinfer-fa2  |  "
                "cpbench sweep --out runs/a --resume  |  cpbench sweep --launch torchrun --nproc-per-node 2 --cp 2 --bs 1,4,16")


def sweep(
    cp: Annotated[str, typer.Option("--cp", help="cp_size values, e.g. 2,4,8.")] = "4",
    bs: Annotated[Optional[str], typer.Option("--bs", help="Batch sizes (requests), e.g. 1,4,16. Default: 1,4,16.")] = None,
    extend_len: Annotated[Optional[str], typer.Option(
        "--extend-len", help="Extend (new) tokens per request, one cell per value. Default: 2048,8192,16384 "
                                      "on a GPU, 32,64 on CPU.")] = None,
    extend_lens: ExtendLensOpt = None,
    seq: SeqAliasOpt = None,
    seq_lens: SeqLensAliasOpt = None,
    prefix: PrefixLenOpt = 0,
    prefix_hit: Annotated[Optional[float], typer.Option(
        "--prefix-hit", help="Fraction of each request's tokens already cached (prefix = floor(RATE x tokens), "
                             "the rest are extend tokens), e.g. 0.5.")] = None,
    lengths: Annotated[Optional[str], typer.Option(
        "--lengths", help="Request-length mix instead of --extend-len: dist:uniform:LO:HI, dist:lognormal:MEDIAN:SIGMA "
                          "(seeded by --seed) or a fixed list 3000,8192,500; cut into batches of --bs.")] = None,
    trace: Annotated[Optional[str], typer.Option(
        "--trace", help="Request trace, CSV or JSONL, one request per line (columns extend_len[,prefix_len], "
                        "input_len[,cached_len] or prompt_tokens[,cached_tokens]); cut into batches of --bs.")] = None,
    batches: Annotated[Optional[int], typer.Option(
        "--batches", help="Batches per --bs value: drawn from a --lengths distribution (default 4), or at most "
                          "this many from a list or trace (default all).")] = None,
    cpu_affinity: Annotated[Optional[str], typer.Option(
        "--cpu-affinity", help="Pin the measuring process to these CPU cores (Linux CPU list, e.g. 0-7); under "
                               "torchrun each local rank gets its own contiguous share.")] = None,
    tp: Annotated[int, typer.Option(
        "--tp", help="Attention tensor parallelism: measure one GPU's heads (q heads / TP, KV heads / TP or one "
                     "replicated).")] = 1,
    ranks: Annotated[str, typer.Option(
        "--ranks", "--rank", help="'all' or a list of ranks, e.g. 0,3 (a cell measured on some ranks has no "
                                  "critical path).")] = "all",
    mode: Annotated[str, typer.Option(
        "--mode", "--modes", help="Modes, comma-separated: two-call, fused, cp-native (one call that duplicates "
                                  f"nothing: {' and '.join(names_with_mode(Mode.CP_NATIVE))} only; others record it "
                                  "unsupported), or both (two-call,fused).")
                    ] = ",".join(MODES),
    backend: Annotated[str, typer.Option(
        "--backend", help=f"Attention backend(s), one or a list measured on the same cells, e.g. "
                          f"trtllm-fmha-v2,flashinfer-fa3: {', '.join(BACKEND_CHOICES)} (auto: the TRT-LLM kernel SGLang "
                          "PR #33137 fuses where one runs, flashinfer-fa2 on other GPUs, torch on CPU), or "
                          "pkg.module:ClassName for a backend class that is not registered (docs/backends.md).")] = "auto",
    timing: Annotated[Optional[str], typer.Option(
        "--timing", help="eager, graph, breakable, or a list (default: breakable,graph,eager on CUDA; "
                         "breakable,eager on CPU, the rest of the layer left out there). breakable: the prefill "
                         "forward as SGLang runs it under breakable CUDA graphs (each layer's other work replayed "
                         "from graph segments, attention eager between them).")] = None,
    forward_layers: Annotated[str, typer.Option(
        "--forward-layers", help="--timing breakable: kinds (default) estimates the forward from one layer of "
                                 "each kind (window, full) timed many times, sum over kinds of layers x its time; "
                                 "all times every layer (a torchrun launch always does).")] = "kinds",
    ep: Annotated[Optional[int], typer.Option(
        "--ep", help="Expert parallelism of the MoE for --timing breakable: experts split over this many GPUs "
                     "(default cp_size x tp).")] = None,
    layer_rest_us: Annotated[Optional[float], typer.Option(
        "--layer-rest-us", help="--timing breakable: N µs of GPU work per layer instead of the model's own "
                                "(a figure read off your engine's trace).")] = None,
    graph_buckets: Annotated[Optional[str], typer.Option(
        "--graph-buckets", help="--timing breakable: token buckets the segments are captured at, as SGLang's "
                                "--cuda-graph-bs-prefill (per rank; eager above 2x the tokens), e.g. "
                                "4096,65536,139264. Default: the exact token count.")] = None,
    max_prefill_tokens: Annotated[int, typer.Option(
        "--max-prefill-tokens", help="Skip (status skipped) a batch of more than this many extend tokens, as "
                                     "SGLang's scheduler never builds one; a single request always runs. "
                                     "0: no cap.")] = 131072,
    cp_min_extend: CpMinExtendOpt = "pr",
    cp_min_tokens: CpMinTokensOpt = 0,
    swa_pool: Annotated[bool, typer.Option(
        "--swa-pool", help="A separate sliding-window KV pool (SGLang's hybrid SWA memory, GPT-OSS): window layers "
                           "read their own caches through their own page table [bs, W], which the fused call "
                           "duplicates too; page-table bytes, duplicate bytes, copy time and memory count both "
                           "tables.")] = False,
    budget_ms: Annotated[float, typer.Option("--budget-ms", help="Time budget per timed variant, ms (the cap), "
                                             "split over the --passes.")] = 200.0,
    passes: Annotated[Optional[int], typer.Option(
        "--passes", help="Time every cell in this many passes over the sweep (pass 1 over all cells, then pass 2, "
                         "...); the speedup interval covers the drift between passes, and faster/slower needs "
                         "every pass to agree. Default: 2 on CUDA, 1 on CPU and under --launch torchrun.")] = None,
    rel_ci: Annotated[float, typer.Option(
        "--rel-ci", help="Stop sampling a variant once the 95% CI of its median is within this fraction of the "
                         "median (0: always use the whole --budget-ms).")] = 0.01,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", help="Untimed forwards before timing (default 3 on CUDA, 1 on CPU).")] = None,
    dtype: Annotated[DType, typer.Option("--dtype", help="q/k/v dtype.")] = DType.bf16,
    seed: Annotated[int, typer.Option("--seed", help="Seed of inputs, page-table permutation and --lengths draws.")] = 0,
    context_len: Annotated[Optional[int], typer.Option(
        "--context-len", help="Tokens the page table is sized for (W = ceil(context_len/page_size)); default: longest sequence.")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Run directory (default runs/<timestamp>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out (without --out: the newest "
                                         "unfinished run of this command in runs/), skipping measured rows; the "
                                         "options must be the run's.")] = False,
    check: Annotated[bool, typer.Option("--check/--no-check", help="Compare outputs with the fp32 torch reference.")] = True,
    allow_mismatch: Annotated[bool, typer.Option("--allow-mismatch", help="Exit 0 even if a check fails.")] = False,
    keep_going: Annotated[bool, typer.Option(
        "--keep-going", help="Exit 0 even if a cell raised (an error row; its traceback is in RUN/errors/).")] = False,
    profile: Annotated[bool, typer.Option("--profile/--no-profile", help="Count kernels per forward (torch.profiler).")] = True,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write plots and report.md at the end.")] = True,
    nvtx: Annotated[bool, typer.Option(
        "--nvtx", help="NVTX ranges (cell, layer, prev/next/combined) around timed eager forwards, for nsys; "
                       "off by default: ~0.4 µs per range shows in short forwards.")] = False,
    fused_order: FusedOrderOpt = "prev-next",
    model: ModelOpt = None, model_config: ModelConfigOpt = None, layers: LayersOpt = None,
    heads: HeadsOpt = None, kv_heads: KvHeadsOpt = None, head_dim: HeadDimOpt = None, window: WindowOpt = None,
    sinks: SinksOpt = None, page_size: PageSizeOpt = None, device: DeviceOpt = None,
    launch: LaunchOpt = Launch.simulated, nproc_per_node: NprocOpt = None, gather: GatherOpt = None,
    dist_backend: DistBackendOpt = DistBackend.auto, dist_timeout: DistTimeoutOpt = 300.0,
    config: Annotated[Optional[str], typer.Option(
        "--config", metavar="FILE", help="A TOML file of options (their long names, e.g. bs = [1, 4, 16], budget-ms = 400); the "
                         "command line wins over it.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="NAME=VALUE", help="name=value for any option, repeatable (e.g. --set rel-ci=0.005); wins over --config.")] = None,
) -> None:
    """Measure fused vs two-call zigzag CP attention for every cell and rank; write a run directory."""
    extend_len = renamed(extend_len, seq, "--extend-len", "--seq")
    extend_lens = renamed(extend_lens, seq_lens, "--extend-lens", "--seq-lens")
    dev = resolve_device(device)
    spec = resolve_model(model, model_config, layers, heads, kv_heads, head_dim, window, sinks, page_size)
    from cpbench.domain.tp import split_heads

    spec = split_heads(spec, tp)
    cells = parse_cells(cp=cp, bs=bs, extend_len=extend_len, extend_lens=extend_lens, prefix=prefix, ranks=ranks, default_bs="1,4,16",
                        default_extend_len="2048,8192,16384" if dev.type == "cuda" else "32,64")
    if not 0 <= seed < 2**63:
        raise CpbenchInputError(f"--seed must be an integer in [0, 2**63), got {seed}")
    mix = workload_batches(cells, lengths=lengths, trace=trace, prefix_hit=prefix_hit, batches=batches, seed=seed,
                           extend_len_given=extend_len is not None)
    longest = max(e + p for ext, pre in mix for e, p in zip(ext, pre)) if mix else cells.longest
    check_out(out, "runs/<timestamp>")
    timing_text = ",".join((Timing.EAGER, Timing.GRAPH)) if timing is not None and timing.strip() == "both" else timing
    from cpbench.commands.config import device_defaults

    defaults = device_defaults(dev, simulated=launch == Launch.simulated)
    timings = choice_list(timing_text if timing is not None else ",".join(defaults["timings"]),
                          TIMINGS, "--timing", both=False)
    buckets = tuple(sorted(set(int_list(graph_buckets, "--graph-buckets")))) if graph_buckets is not None else ()
    layer_rest_us = None if layer_rest_us is None else layer_rest_us + 0.0  # -0 -> 0
    if timing is None and layer_rest_us is None and ep is None:  # --ep asks for the model's MoE
        layer_rest_us = defaults.get("layer_rest_us")  # CPU: the default breakable leaves the layer's rest out
    warmup = defaults["warmup"] if warmup is None else warmup
    if passes is not None and passes > 1 and launch != Launch.simulated:
        raise CpbenchInputError("--passes > 1 is for simulated ranks; a torchrun launch times its ranks together in "
                                "one pass: drop --passes")
    if passes is None:
        passes = defaults["passes"]
    if cpu_affinity is not None:
        from cpbench.measure.affinity import parse_cpu_list

        parse_cpu_list(cpu_affinity)  # a bad list fails here, before a launch starts its ranks
    dist = DistOptions(launch, nproc_per_node, gather, dist_backend, dist_timeout)
    dist.check(cells.ranks, cells.cp_sizes)
    from cpbench.commands.sweep import SweepOutput, make_config

    cfg = make_config(",".join(backend_list(backend)),
                      model=spec, cp_sizes=tuple(cells.cp_sizes), batches=batches_of(cells, mix),
                      cells_from=cells_record(cells, mix, lengths=lengths, trace=trace, prefix_hit=prefix_hit),
                      device=dev, ranks=None if cells.ranks is None else tuple(cells.ranks),
                      modes=tuple(choice_list(",".join(",".join(MODES) if m.strip() == "both" else m for m in mode.split(",")),
                                              ALL_MODES, "--mode", both=False)), timings=tuple(timings),
                      budget_ms=budget_ms, rel_ci=rel_ci or None, warmup=warmup, dtype=dtype.value, seed=seed,
                      check=check, context_len=context_len, profile=profile, nvtx=nvtx, gather=dist.gather_mode,
                      fused_order=fused_order, tp_size=tp, max_prefill_tokens=max_prefill_tokens,
                      cp_min_extend=cp_min_extend, cp_min_tokens=cp_min_tokens, swa_pool=swa_pool,
                      ep=ep, layer_rest_us=layer_rest_us, graph_buckets=buckets, passes=passes,
                      forward_layers=forward_layers)
    if Timing.BREAKABLE in timings and layer_rest_us is None and dev.type == "cpu" and spec.num_layers * spec.hidden_size > 8192:
        err_console.print(f"note: --timing breakable on a CPU runs {spec.name}'s whole layer {spec.num_layers} times a "
                          "forward (seconds per forward for a large model); --layers 2 or --layer-rest-us N keeps a "
                          "functional check short", highlight=False)
    output = SweepOutput(out, resume, report, allow_mismatch, keep_going)
    if not dist.distributed:
        raise typer.Exit(run_sweep(cfg, output, cpu_affinity=cpu_affinity))
    if not under_torchrun():
        from cpbench.results.store import out_dir
        from cpbench.commands.resume import precheck_resume

        if out is not None:
            out_dir(out)  # a file: refused before torchrun starts
        check = (lambda world: precheck_resume(cfg, out, world, cpu_affinity)) if resume else None
        raise typer.Exit(launch_torchrun(dist, cells.cp_sizes, dev, cfg.backend, out, "", precheck=check,
                                         cell_cp_sizes=[c.cp_size for c in cfg.cells()]))
    raise typer.Exit(run_as_rank(dist, dev, lambda group, device: run_sweep(
        dataclasses.replace(cfg, device=device), output, group=group, cpu_affinity=cpu_affinity)))


def run_sweep(cfg, output, *, console: Console = console, group=None, cpu_affinity: str | None = None) -> int:
    """Run the sweep ``cfg`` (commands.config.SweepConfig) into ``output`` (commands.sweep.SweepOutput) through
    :func:`cpbench.api.sweep`, with a progress bar and the console summary; return the exit code (0 ok, 1 a
    mismatch or an error row, 2 nothing could run). ``group``: where ranks run (default: every rank here, one
    after another). ``cpu_affinity``: a CPU list this process is pinned to first (its local rank's share under
    torchrun; the manifest records the writer's cores).

    Raises CpbenchInputError for bad input found before anything is measured.
    """
    from cpbench.api import SweepHooks, sweep

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=console, transient=False)
    task = None

    def opened(sw) -> None:
        nonlocal task
        bar.disable = sw.run_dir is None
        if sw.run_dir is not None:
            _print_header(sw, console)
        task = bar.add_task("ranks", total=sw.total_ranks())
        bar.start()

    passes = cfg.passes
    run_dir = None

    def opened_here(sw) -> None:
        nonlocal run_dir
        run_dir = sw.run_dir
        opened(sw)

    hooks = SweepHooks(opened=opened_here, finished=lambda sw: bar.stop(), rank=lambda: bar.advance(task),
                       cell=lambda c, p: bar.update(task, description=c.label() + (f" pass {p}/{passes}"
                                                                                   if passes > 1 else "")))
    try:
        run = sweep(cfg, output.out, resume=output.resume, report=output.report, allow_mismatch=output.allow_mismatch,
                    keep_going=output.keep_going, group=group, cpu_affinity=cpu_affinity, hooks=hooks,
                    chart_workers=None)  # the CLI's entry points are guarded: the charts may use worker processes
    except KeyboardInterrupt:
        if run_dir is None:  # nothing written yet
            raise SweepInterrupted("interrupted: the sweep had not made its run directory yet, nothing was written; "
                                   "rerun the same command") from None
        raise SweepInterrupted(f"interrupted: the rows measured so far are in {run_dir}; to finish the run: "
                               f"{resume_command(sys.argv[1:], run_dir)}") from None
    finally:
        if task is not None:  # a bar never started (bad input found first) would still print an empty line
            bar.stop()
    if run.path is None:
        return 0
    show_summary(console, run.rows, cpu=cfg.device.type == "cpu")
    if run.report_path is not None:
        console.print(f"report: {run.report_path}")
    console.print(f"run directory: {run.path}")
    if run.exit_code == 2:
        err_console.print(f"[red]error:[/] {escape(run.message)}", soft_wrap=True)
    elif run.exit_code == 1:
        console.print(f"[red]{escape(run.message)}[/]")
    return run.exit_code


class SweepInterrupted(Exception):
    """Ctrl-C (SIGINT) during a sweep; the message is the one line to print: where the rows are and the exact command
    that finishes the run, or that nothing was written yet (exit code 130, as an interrupt)."""


def resume_command(argv: list[str], run_dir) -> str:
    """The command that resumes the run in ``run_dir``: ``argv`` (the interrupted command's arguments after the
    program name, e.g. ``["sweep", "--cp", "4"]``) without its ``--out``/``--resume``, then ``--out run_dir
    --resume``, shell-quoted."""
    import shlex

    from cpbench.report.run_report import without_out

    return f"{without_out(shlex.join(['cpbench', *argv]))} --out {shlex.quote(str(run_dir))} --resume"


def _print_header(sweep, console: Console) -> None:
    """The sweep's first line (model, device, backends, launch, run directory) and the backends' first-use
    notes (a JIT build ahead)."""
    cfg, run_dir = sweep.cfg, sweep.run_dir
    if sweep.found:
        console.print(f"--resume without --out: resuming {run_dir}, the newest unfinished run of this command",
                      highlight=False, soft_wrap=True)
    env = run_dir.read_manifest()
    launch = sweep.runner.group
    console.print(f"[bold]cpbench sweep[/] {cfg.model.name} on {env.get('gpu_name') or env.get('cpu')} "
                  f"· backend [cyan]{', '.join(cfg.backends)}[/] · {launch.launch} x{launch.world_size} -> {run_dir}"
                  + (f" (resuming, {sweep.resumed_rows} row{'' if sweep.resumed_rows == 1 else 's'} on disk)"
                     if sweep.resumed_rows else ""))
    from cpbench.commands.runner import DTYPES

    for backend in sweep.runner.backends.values():
        note = getattr(backend, "first_use_note", lambda dtype: None)(DTYPES[cfg.dtype])
        if note:
            console.print(f"[yellow]{escape(note)}[/]")


def _ms(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x / 1e3:.3f}"


TIMING_ORDER = (Timing.BREAKABLE, Timing.GRAPH, Timing.EAGER)  # the order the summary prints timings in


def show_summary(console: Console, df, cpu: bool = False) -> None:
    """Table per (cp_size, backend, timing): critical-path two-call ms, fused ms, the share of the two-call time
    fused saves with its 95% CI (``verdicts.effect_text``, the report's notation) and verdict (not on a CPU, whose
    effects carry no claim: its caveat comes first), status; a host-bound eager cell carries the report's mark (†).

    A cell measured on some ranks only (``--ranks``) shows its measured ranks (``rank 0 only (1 of 4)``)
    and the slowest *measured* rank's latencies, never a speedup: it has no critical path. ``cpu``: the
    ratio is labelled as such, and a line says CPU timings are a functional check, not a benchmark. A run
    without two-call or fused (``--modes``) shows the latencies of the mode it measured, without an effect; the
    cp-native rows follow in :func:`show_line` (a cp-native-only run: its one table).
    """
    from cpbench.results.critical_path import critical_path
    from cpbench.cli.tables import Col, print_table

    from cpbench.report.tables import HOST_MARK
    from cpbench.results.critical_path import flag
    from cpbench.report.tables import forward_text
    from cpbench.report.units import EFFECT_UNIT
    from cpbench.results.verdicts import CPU_CLAIM, effect_text, speedup_verdict

    cp = critical_path(df)
    if cpu and len(df):  # the caveat before the ratios it qualifies
        console.print(f"CPU: a {CPU_CLAIM} (CPU timings move by tens of percent between runs; the effects below "
                      "are no speedup claim)")
    marked = False
    ran = [m for m in MODES if "mode" in df and (df["mode"] == m).any()]  # a mode not measured gets no column
    pair = len(ran) == len(MODES)
    order = {t: i for i, t in enumerate(TIMING_ORDER)}  # the forward's answer first, then attention alone
    groups = sorted(cp.groupby(["cp_size", "backend", "timing"], sort=True),
                    key=lambda kv: (kv[0][0], order.get(kv[0][2], len(order)), kv[0][1])) if len(cp) else []
    for (cp_size, backend, timing), g in groups:
        partial = not bool(g["all_ranks"].all())
        forward = timing == Timing.BREAKABLE
        what = (("the breakable forward's structure (a CPU has no CUDA graphs: a functional check)" if cpu else
                 "the prefill forward (breakable CUDA graphs, the rest of every layer included)") if forward else
                "attention alone" + (" (eager: host-bound cells marked)" if timing == Timing.EAGER else ""))
        title = (f"cp_size {cp_size}, {backend}, {timing}: {what}, "
                 + ("slowest measured rank (not the critical path: some ranks were not measured)" if partial
                    else "critical path (slowest rank)"))
        cols = [Col("bs"), Col("extend"), *([Col("ranks measured", number=False)] if partial else []),
                *[Col(f"{m} ms") for m in ran], *([Col(EFFECT_UNIT if cpu else f"{EFFECT_UNIT} [95% CI]")] if pair else []),
                *([] if cpu or not pair else [Col("fuse?", number=False)]), Col("status", number=False)]
        rows = []
        for _, r in g.sort_values(["bs", "max_extend_len"]).iterrows():
            sp, lo, hi = r["speedup"], r.get("speedup_ci_low", math.nan), r.get("speedup_ci_high", math.nan)
            mark = f" {HOST_MARK}" if timing == Timing.EAGER and flag(r.get("host_bound")) else ""
            marked |= bool(mark)
            rows.append([str(r["bs"]), str(r["max_extend_len"]), *([r["ranks_label"]] if partial else []),
                         *[_ms(r[f"{m.tag}_us"]) for m in ran],
                         *(["-" if sp != sp else (effect_text(sp) if cpu else forward_text(r) if forward
                                                  else effect_text(sp, lo, hi) + mark)] if pair else []),
                         *([] if cpu or not pair else [speedup_verdict(sp, lo, hi) if sp == sp else "-"]),
                         r["status"] if r["status"] == Status.OK else f"{r['status']}: {shorten(r['reason'], 120)}"])
        print_table(console, title, cols, rows)
    if marked:
        console.print(f"{HOST_MARK} host-bound eager cell: its latency exceeds {host_bound_text()} the GPU busy time, so the eager "
                      "effect measures how fast the CPU launches (the report gives its GPU-time effect)")
    show_line(console, df, cpu)


def show_line(console: Console, df, cpu: bool = False) -> None:
    """Table per (cp_size, backend, timing) of a run with cp-native rows (``--modes two-call,fused,cp-native``):
    the latency of each mode the run measured on the critical path (ms) and, with fused, the share of the fused
    time cp-native saves with its 95 % interval (without one on a CPU). Prints nothing for a run without cp-native
    rows. The report's "Three points" section has the rest."""
    from cpbench.cli.tables import Col, print_table
    from cpbench.report.tables import modes_text
    from cpbench.studies.line.view import line_view
    from cpbench.results.verdicts import effect_text

    line = line_view(df)
    if line.empty:
        return
    ran = [m for m in ALL_MODES if (df["mode"] == m).any()]  # a mode the run did not measure gets no column
    effect = Mode.FUSED in ran
    what = "three points" if len(ran) == len(ALL_MODES) else modes_text(ran)
    for (cp_size, backend, timing), g in line.groupby(["cp_size", "backend", "timing"], sort=True):
        cols = [Col("bs"), Col("extend"), *[Col(f"{m} ms") for m in ran],
                *([Col("cp-native saves, % of fused" + ("" if cpu else " [95% CI]"))] if effect else [])]
        rows = []
        for _, r in g.sort_values(["bs", "max_extend_len"]).iterrows():
            sp = r["native_vs_fused"]
            rows.append([str(r["bs"]), str(r["max_extend_len"]), *[_ms(r[f"{m.tag}_us"]) for m in ran],
                         *(["-" if sp != sp else effect_text(sp) if cpu else
                            effect_text(sp, r["native_vs_fused_ci_low"], r["native_vs_fused_ci_high"])] if effect
                           else [])])
        print_table(console, f"cp_size {cp_size}, {backend}, {timing}: {what}, critical path", cols, rows)
