"""``cpbench profile``: kernel counts per rank, Perfetto traces, nsys cross-check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cpbench.domain.modes import Status
from cpbench.cli import options as c
from cpbench.ranks.launch import under_torchrun
from cpbench.cli.cells import backend_name, batches_of, check_not_written, check_out, parse_cells
from cpbench.cli.profile_out import (CPU_DEFAULT_EXTEND_LEN, GPU_ONLY, counted_as, cpu_rows, print_counts, skip_reason,
                                     skipped_cell, write_profile)
from cpbench.cli.dist import (DistBackend, DistBackendOpt, DistOptions, DistTimeoutOpt, GatherOpt, Launch,
                              LaunchOpt, NprocOpt, launch_torchrun, run_as_rank)
from cpbench.domain.jsonfile import dumps
from cpbench.errors import CpbenchInputError, one_line

PROFILE_EPILOG = ("Examples:  cpbench profile --cp 4 --bs 1 --extend-len 8192  |  cpbench profile --backend torch "
                  "--cp 4 --bs 1 --extend-len 256 --json  |  cpbench profile --cp 4 --ranks 0  |  "
                  "cpbench profile --cp 4 --bs 1 --extend-len 8192 --nsys  |  cpbench profile --from traces/ --cell 'cp4 bs1 "
                  "ext8192' --run runs/fa3")


def profile(
    cp: Annotated[Optional[str], typer.Option(
        "--cp", help="cp_size values (default 4). With --from: the CP size the engine ran, which the fused/two-call "
                     "verdict needs where the trace shows no CP collectives.", show_default=False)] = None,
    bs: Annotated[Optional[str], typer.Option("--bs", help="Batch sizes. Default: 1.")] = None,
    extend_len: Annotated[Optional[str], typer.Option(
        "--extend-len", help="Extend (new) tokens per request, one cell per value. Default: 8192 on a "
                                      "GPU, 64 on CPU.")] = None,
    extend_lens: c.ExtendLensOpt = None,
    seq: c.SeqAliasOpt = None,
    seq_lens: c.SeqLensAliasOpt = None,
    prefix: c.PrefixLenOpt = 0,
    ranks: Annotated[str, typer.Option(
        "--ranks", "--rank", help="'all' or a list of ranks, e.g. 0,3.")] = "all",
    backend: Annotated[str, typer.Option("--backend", help="Attention backend (one).",
                                         metavar=c.backend_metavar())] = "auto",
    dtype: Annotated[c.DType, typer.Option("--dtype")] = c.DType.bf16,
    out: Annotated[Optional[str], typer.Option("--out", help="Directory for traces (default runs/profile-<time>). "
                                                             "With --from: where to write profile.json (the --json "
                                                             "report); none by default.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
    nsys: Annotated[bool, typer.Option("--nsys", help="Also run under Nsight Systems and cross-check the counts.")] = False,
    nsys_child: Annotated[bool, typer.Option("--nsys-child", hidden=True)] = False,
    tp: Annotated[int, typer.Option("--tp", help="Attention tensor parallelism: one GPU's heads.")] = 1,
    model: c.ModelOpt = None, model_config: c.ModelConfigOpt = None, layers: c.LayersOpt = None,
    heads: c.HeadsOpt = None, kv_heads: c.KvHeadsOpt = None, head_dim: c.HeadDimOpt = None,
    window: c.WindowOpt = None, sinks: c.SinksOpt = None, page_size: c.PageSizeOpt = None,
    device: c.DeviceOpt = None,
    launch: LaunchOpt = Launch.simulated, nproc_per_node: NprocOpt = None, gather: GatherOpt = None,
    dist_backend: DistBackendOpt = DistBackend.auto, dist_timeout: DistTimeoutOpt = 300.0,
    from_: Annotated[Optional[list[str]], typer.Option(
        "--from", help="Read an engine's own traces instead of profiling: torch.profiler traces (one per rank, "
                       "plain or .gz), a directory of them, or an nsys report (.nsys-rep, .sqlite). No GPU needed.",
        show_default=False)] = None,
    forward_range: Annotated[Optional[str], typer.Option(
        "--forward-range", help="With --from: the annotation range that bounds a forward (a name or a glob, e.g. "
                                "'ProfilerStep#*', 'prefill_forward'); without one in the trace, forwards are the "
                                "model's layer count of attention launches. Default: 'ProfilerStep#*'.", show_default=False)] = None,
    cell: Annotated[Optional[str], typer.Option(
        "--cell", help="With --from: the cpbench cell to set beside the engine, e.g. 'cp4 bs1 ext8192'.")] = None,
    more_traces: Annotated[Optional[list[str]], typer.Argument(
        help="With --from: more trace files (--from rank0.json.gz rank1.json.gz, or a shell glob).",
        show_default=False, metavar="TRACE")] = None,
    run: Annotated[Optional[str], typer.Option(
        "--run", help="With --from --cell: the cpbench run directory to read the cell from (default: measure it "
                      "now).")] = None,
) -> None:
    """Count attention kernels per rank, two-call vs fused (e.g. 72 -> 36 per rank, 288 -> 144 over
    4 ranks), and write Perfetto-openable Chrome traces (one per rank and mode; with --launch torchrun
    each rank writes its own, with the collective kernels counted as their own class)."""
    if more_traces and not from_:
        raise CpbenchInputError(f"unexpected argument {more_traces[0]!r}: trace files follow --from (cpbench profile "
                                "--from TRACE...)")
    if from_:
        from cpbench.cli.profile_from import profile_from

        from_ = [*from_, *(more_traces or [])]
        given = [name for name, value, default in (
            ("--bs", bs, None), ("--extend-len", extend_len, None), ("--extend-lens", extend_lens, None),
            ("--seq", seq, None), ("--seq-lens", seq_lens, None), ("--prefix-len", prefix, 0), ("--ranks", ranks, "all"),
            ("--backend", backend, "auto"), ("--nsys", nsys, False), ("--tp", tp, 1),
            ("--launch", launch, Launch.simulated), ("--nproc-per-node", nproc_per_node, None), ("--gather", gather, None),
            ("--dist-backend", dist_backend, DistBackend.auto), ("--dtype", dtype, c.DType.bf16)) if value != default]
        if given:
            raise CpbenchInputError(f"{given[0]} measures cpbench's own cells; --from only reads traces: drop "
                                    f"{given[0]} (the cell to compare with is --cell)")
        spec = c.resolve_model(model, model_config, layers, heads, kv_heads, head_dim, window, sinks, page_size)
        raise typer.Exit(profile_from(from_, spec, forward_range=forward_range, cell=cell, run=run, as_json=as_json,
                                      device=device, cp=cp, out=out,
                                      model_named=model is not None or model_config is not None or window is not None))
    if cell or run or forward_range is not None:
        raise CpbenchInputError("--cell, --run and --forward-range go with --from (an engine's traces): add --from "
                                "TRACE, or use --cp/--bs/--extend-len to profile cpbench's own cells")
    cp = "4" if cp is None else cp
    extend_len = c.renamed(extend_len, seq, "--extend-len", "--seq")
    extend_lens = c.renamed(extend_lens, seq_lens, "--extend-lens", "--seq-lens")
    from cpbench.commands.prepare import CellPrep
    from cpbench.commands.profiling import nsys_child as run_child
    from cpbench.domain.cells import plan_cells
    from cpbench.profiles.nsys import find_nsys

    backend = c.one_backend(backend, "profile")
    dev = c.resolve_device(device)
    spec = c.resolve_model(model, model_config, layers, heads, kv_heads, head_dim, window, sinks, page_size)
    from cpbench.domain.tp import split_heads

    spec = split_heads(spec, tp)
    name = backend_name(backend, dev)
    parsed = parse_cells(cp=cp, bs=bs, extend_len=extend_len, extend_lens=extend_lens, prefix=prefix, ranks=ranks,
                         default_bs="1", default_extend_len="8192" if dev.type == "cuda" else CPU_DEFAULT_EXTEND_LEN)
    cells = plan_cells(parsed.cp_sizes, batches_of(parsed, None))
    kw = dict(backend=name, device=dev, dtype=dtype.value, ranks=parsed.ranks)
    if nsys_child:
        run_child(spec, [cl for cl in cells if not skip_reason(spec, cl, dev)], **kw)
        return
    CellPrep(spec, dev, dtype.value).check(name)  # one that cannot run here is refused before any cell
    skipped = {cl: skip_reason(spec, cl, dev) for cl in cells}
    skipped = {cl: why for cl, why in skipped.items() if why}
    if len(skipped) == len(cells):  # as sweep: nothing could run is bad input
        first = next(iter(skipped.items()))
        raise CpbenchInputError(f"no cell can run: {first[0].label()}: {first[1]}")
    cells = [cl for cl in cells if cl not in skipped]
    check_out(out, "runs/profile-<time>")
    dist = DistOptions(launch, nproc_per_node, gather, dist_backend, dist_timeout)
    dist.check(parsed.ranks, parsed.cp_sizes)
    if dist.distributed and nsys:
        raise CpbenchInputError("--nsys with --launch torchrun is not supported: run nsys around torchrun "
                                "yourself, or drop --nsys")
    from cpbench.results.store import RunDir, out_dir

    run_dir = out_dir(out, "profile")
    check_not_written(run_dir, "profile.json")
    traces = RunDir(run_dir).profiles
    if not under_torchrun() and traces.is_dir() and any(traces.iterdir()):  # (ranks: their own traces, at once)
        raise CpbenchInputError(f"{str(traces)!r} holds traces of an earlier profile that did not finish: pick "
                                "another --out, or move them away to profile here")
    if dist.distributed and not under_torchrun():
        if run_dir.is_dir():  # a directory another command writes: refused here, before any rank waits on it
            with RunDir(run_dir).held():
                pass
        raise typer.Exit(launch_torchrun(dist, parsed.cp_sizes, dev, name, out, "profile",
                                         resume_hint=False, cell_cp_sizes=[c.cp_size for c in cells]))
    if nsys and find_nsys() is None:
        raise CpbenchInputError("--nsys: nsys not found; install Nsight Systems or put nsys on PATH "
                                "(`cpbench doctor` shows what is found), or drop --nsys")

    trace_dir = RunDir(run_dir).profiles
    report = {"model": spec.name, "tp_size": tp, "backend": name, "device": str(dev), "counted": counted_as(name, dev),
              "cells": [skipped_cell(cl, why) for cl, why in skipped.items()]}
    if dist.distributed:
        from cpbench.domain.modes import Timing
        from cpbench.commands.config import SweepConfig

        def body(group, device) -> int:
            trace_dir.mkdir(parents=True, exist_ok=True)
            report["device"], report["launch"] = str(device), {"world_size": group.world_size, "gather": dist.gather_mode}
            # the ranks measure the cells as a sweep's ranks do (their rows are sweep rows), one short eager timing each
            cfg = SweepConfig(model=spec, cp_sizes=tuple(parsed.cp_sizes), batches=batches_of(parsed, None),
                              backends=(name,), device=device, timings=(Timing.EAGER,), budget_ms=1.0, warmup=1,
                              dtype=dtype.value, gather=dist.gather_mode)
            _profile_ranks(cfg, cells, group, report, run_dir, trace_dir)
            if not group.writes_rows:
                return 0
            _finish(report, run_dir, as_json)
            if not any(cell["status"] == Status.OK for cell in report["cells"]):
                return 1  # every cell failed on a rank: each is named above and recorded in profile.json
            return 1 if any(r.get("comm_check") is False for cell in report["cells"] for r in cell["per_rank"]) else 0

        raise typer.Exit(run_as_rank(dist, dev, lambda group, device: _locked(
            run_dir, group.writes_rows, lambda: body(group, device))))
    with RunDir(run_dir).held():  # another profile, explain or sweep writing here is refused
        trace_dir.mkdir(parents=True, exist_ok=True)
        _profile_here(spec, cells, kw, report, run_dir, trace_dir, dev, name, nsys, as_json)


def _locked(run_dir: Path, writer: bool, fn):
    """``fn()`` holding ``run_dir``'s lock when this process writes it (rank 0 of a launch)."""
    from cpbench.results.store import RunDir

    if not writer:
        return fn()
    with RunDir(run_dir).held():
        return fn()


def _profile_ranks(cfg, cells, group, report: dict, run_dir: Path, trace_dir: Path) -> None:
    """This rank's part of a torchrun profile (commands.profiling.profile_ranks: ``cells`` measured as ``cfg``, a
    SweepConfig, says); on rank 0 each cell's entry joins
    ``report["cells"]`` and profile.json is rewritten (partial) as soon as the cell is done, so a launch killed
    part-way keeps the counts of the cells it finished."""
    from cpbench.commands.profiling import profile_ranks

    def done(cell: dict) -> None:
        report["cells"].append({**cell, "per_rank": cell["per_rank"] if cfg.device.type == "cuda" else
                                [{**r, **{k: None for k in GPU_ONLY if k in r and k != "comm_kernels"}}
                                 for r in cell["per_rank"]]})
        write_profile(run_dir, report, partial=True)

    profile_ranks(cfg, cells, group, trace_dir=trace_dir, on_cell=done)


def _profile_here(spec, cells, kw, report, run_dir: Path, trace_dir: Path, dev, name: str, nsys: bool,
                  as_json: bool) -> None:
    """Profile every cell in this process (ranks one after another), rewriting profile.json (partial) after each
    cell, then write it whole and print."""
    from cpbench.commands.profiling import profile_cell, totals
    from cpbench.commands.runner import is_oom

    for cell in cells:
        try:
            rows = profile_cell(spec, cell, trace_dir=trace_dir, **kw)
        except RuntimeError as e:
            if not is_oom(e):
                raise
            report["cells"].append({**skipped_cell(cell, f"does not fit in memory ({one_line(e)[:120]}): use a "
                                                         "smaller --extend-len/--bs"), "status": Status.OOM})
            write_profile(run_dir, report, partial=True)
            continue
        report["cells"].append(cell.key().as_json(status=Status.OK, per_rank=cpu_rows(rows, dev),
                                                     total=totals(rows, cell.cp_size)))
        write_profile(run_dir, report, partial=True)
    if not any(cell["status"] == Status.OK for cell in report["cells"]):
        write_profile(run_dir, report)
        raise CpbenchInputError(f"no cell could be profiled: {report['cells'][0]['reason']}")
    if nsys:
        report["nsys"] = _nsys_cross_check(sys.argv[1:], run_dir, report, name)
    _finish(report, run_dir, as_json)


def _finish(report: dict, run_dir: Path, as_json: bool) -> None:
    """Write profile.json whole (no longer partial) and print the counts (``as_json``: the report as JSON)."""
    write_profile(run_dir, report)
    if as_json:
        print(dumps(report))
    else:
        print_counts(c.console, report, run_dir)


def _nsys_cross_check(argv: list[str], run_dir: Path, report: dict, backend: str) -> dict:
    """Re-run this command under nsys (child mode) and compare kernels per NVTX forward range."""
    from cpbench.kernels.backends.registry import known_attention_patterns
    from cpbench.results.store import RunDir
    from cpbench.profiles.nsys import (find_nsys, kernels_per_range, nsys_profile_argv, parse_nvtx_kern_sum,
                                       report_path, stats_argv)

    exe = find_nsys()
    if exe is None:
        return {"status": Status.SKIPPED, "reason": "nsys not found (install Nsight Systems or put nsys on PATH)"}
    child = [sys.executable, "-m", "cpbench", *[a for a in argv if a not in ("--nsys", "--json")], "--nsys-child"]
    base = RunDir(run_dir).profiles / "nsys"
    proc = subprocess.run(nsys_profile_argv(base, child, exe), capture_output=True, text=True)
    if proc.returncode != 0:
        return {"status": Status.ERROR, "reason": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    rep = report_path(base)
    stats = subprocess.run(stats_argv(rep, exe), capture_output=True, text=True)
    csv_path = RunDir(run_dir).profiles / "nvtx_kern_sum.csv"
    csv_path.write_text(stats.stdout, encoding="utf-8")
    per_range = kernels_per_range(parse_nvtx_kern_sum(stats.stdout), known_attention_patterns())
    # the torch reference has no attention kernel to name: compare all kernels of each forward instead
    what = "kernels" if backend == "torch" else "attention"
    checks, agree = [], True
    for cell in report["cells"]:
        for r in cell["per_rank"]:
            got = per_range.get(r["label"])
            n = getattr(got, what) if got is not None else None
            want = r["kernels"] if what == "kernels" else r["attn_kernels"]
            agree &= n == want
            checks.append({"label": r["label"], "counted": what, "torch_profiler": want, "nsys": n, "equal": n == want})
    return {"status": "equal" if agree else "DIFFERENT", "report": str(rep), "csv": str(csv_path), "checks": checks}
