"""``cpbench profile``: kernel counts per rank, Perfetto traces, nsys cross-check."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cpbench import cli_options as c
from cpbench.bench.dist.launch import under_torchrun
from cpbench.cli_cells import backend_name, check_out, parse_cells
from cpbench.cli_dist import (DistBackend, DistBackendOpt, DistOptions, DistTimeoutOpt, GatherOpt, Launch, LaunchOpt,
                              NprocOpt, launch_torchrun, run_as_rank)
from cpbench.errors import CpbenchInputError, one_line

PROFILE_EPILOG = ("Examples:  cpbench profile --cp 4 --bs 1 --seq 8192  |  cpbench profile --backend torch "
                  "--cp 4 --bs 1 --seq 256 --json  |  cpbench profile --cp 4 --bs 1 --seq 8192 --nsys")


def profile(
    cp: Annotated[str, typer.Option("--cp", help="cp_size values.")] = "4",
    bs: Annotated[Optional[str], typer.Option("--bs", help="Batch sizes. Default: 1.")] = None,
    seq: Annotated[Optional[str], typer.Option("--seq", help="Extend lengths per request (tokens). Default: 8192.")] = None,
    seq_lens: Annotated[Optional[str], typer.Option("--seq-lens", help="One explicit batch, e.g. 3000,5000.")] = None,
    prefix: Annotated[int, typer.Option("--prefix", help="Cached prefix tokens per request.")] = 0,
    ranks: Annotated[str, typer.Option("--ranks", help="'all' or a list of ranks.")] = "all",
    backend: Annotated[c.BackendName, typer.Option("--backend", help="Attention backend.")] = c.BackendName.auto,
    dtype: Annotated[c.DType, typer.Option("--dtype")] = c.DType.bf16,
    out: Annotated[Optional[str], typer.Option("--out", help="Directory for traces (default runs/profile-<time>).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
    nsys: Annotated[bool, typer.Option("--nsys", help="Also run under Nsight Systems and cross-check the counts.")] = False,
    nsys_child: Annotated[bool, typer.Option("--nsys-child", hidden=True)] = False,
    tp: Annotated[int, typer.Option("--tp", help="Attention tensor parallelism: one GPU's heads.")] = 1,
    model: c.ModelOpt = "gpt-oss-120b", model_config: c.ModelConfigOpt = None, layers: c.LayersOpt = None,
    heads: c.HeadsOpt = None, kv_heads: c.KvHeadsOpt = None, head_dim: c.HeadDimOpt = None,
    window: c.WindowOpt = None, sinks: c.SinksOpt = None, page_size: c.PageSizeOpt = None,
    device: c.DeviceOpt = None,
    launch: LaunchOpt = Launch.simulated, nproc_per_node: NprocOpt = None, gather: GatherOpt = None,
    dist_backend: DistBackendOpt = DistBackend.auto, dist_timeout: DistTimeoutOpt = 300.0,
) -> None:
    """Count attention kernels per rank, two-call vs fused (e.g. 72 -> 36 per rank, 288 -> 144 over
    4 ranks), and write Perfetto-openable Chrome traces (one per rank and mode; with --launch torchrun
    each rank writes its own, with the collective kernels counted as their own class)."""
    from cpbench.bench.backends import get_backend
    from cpbench.bench.geometry import eligibility
    from cpbench.bench.profiling import nsys_child as run_child, profile_cell, totals
    from cpbench.bench.runner import DTYPES, CellSpec, cpu_refusal, is_oom
    from cpbench.profiles.nsys import find_nsys

    dev = c.resolve_device(device)
    spec = c.resolve_model(model, model_config, layers, heads, kv_heads, head_dim, window, sinks, page_size)
    from cpbench.bench.tp import split_heads

    spec = split_heads(spec, tp)
    name = backend_name(backend.value, dev)
    parsed = parse_cells(cp=cp, bs=bs, seq=seq, seq_lens=seq_lens, prefix=prefix, ranks=ranks,
                         default_bs="1", default_seq="8192")
    cells = [CellSpec(p, ext, (parsed.prefix,) * len(ext)) for p in parsed.cp_sizes for ext in parsed.batches]
    kw = dict(backend=name, device=dev, dtype=dtype.value, ranks=parsed.ranks)
    if nsys_child:
        run_child(spec, cells, **kw)
        return
    why = get_backend(name).supports(dev, spec, DTYPES[dtype.value])
    if why:
        raise CpbenchInputError(f"backend {name}: {why}")
    for cell in cells:
        ok, why = eligibility(cell.extend_lens, cell.cp_size)
        why = None if ok else f"not CP-eligible ({why})"
        why = why or (cpu_refusal(spec, cell) if dev.type == "cpu" else None)
        if why:
            raise CpbenchInputError(f"{cell.label()}: {why}")
    check_out(out, "runs/profile-<time>")
    dist = DistOptions(launch, nproc_per_node, gather, dist_backend, dist_timeout)
    dist.check(parsed.ranks, parsed.cp_sizes)
    if dist.distributed and nsys:
        raise CpbenchInputError("--nsys with --launch torchrun is not supported: run nsys around torchrun "
                                "yourself, or drop --nsys")
    if dist.distributed and not under_torchrun():
        raise typer.Exit(launch_torchrun(dist, parsed.cp_sizes, dev, name, out, "profile-%Y%m%d-%H%M%S",
                                         resume_hint=False))
    if nsys and find_nsys() is None:
        raise CpbenchInputError("--nsys: nsys not found; install Nsight Systems or put nsys on PATH "
                                "(`cpbench doctor` shows what is found), or drop --nsys")
    run_dir = Path(out) if out else Path("runs") / datetime.now().strftime("profile-%Y%m%d-%H%M%S")
    if run_dir.exists() and not run_dir.is_dir():
        raise CpbenchInputError(f"--out {str(run_dir)!r} is a file: pass a directory")
    from cpbench.bench.store import RunDir

    trace_dir = RunDir(run_dir).profiles
    trace_dir.mkdir(parents=True, exist_ok=True)
    report = {"model": spec.name, "tp_size": tp, "backend": name, "device": str(dev), "cells": []}
    if dist.distributed:
        def body(group, device) -> int:
            from cpbench.bench.profiling import profile_ranks

            report["device"], report["launch"] = str(device), {"world_size": group.world_size, "gather": dist.gather_mode}
            report["cells"] = profile_ranks(spec, cells, group, backend=name, device=device, dtype=dtype.value,
                                            trace_dir=trace_dir, gather=dist.gather_mode)
            if group.writes_rows:
                _finish(report, run_dir, as_json)
            return 1 if any(r.get("comm_check") is False for cell in report["cells"] for r in cell["per_rank"]) else 0

        raise typer.Exit(run_as_rank(dist, dev, body))
    for cell in cells:
        try:
            rows = profile_cell(spec, cell, trace_dir=trace_dir, **kw)
        except RuntimeError as e:
            if not is_oom(e):
                raise
            raise CpbenchInputError(f"{cell.label()} does not fit in memory ({one_line(e)[:120]}): "
                                    "use a smaller --seq/--bs") from None
        report["cells"].append({"cp_size": cell.cp_size, "bs": cell.bs, "seq_len": cell.seq_len,
                                "extend_lens": list(cell.extend_lens), "per_rank": rows, "total": totals(rows)})
    if nsys:
        report["nsys"] = _nsys_cross_check(sys.argv[1:], run_dir, report, name)
    _finish(report, run_dir, as_json)


def _finish(report: dict, run_dir: Path, as_json: bool) -> None:
    (run_dir / "profile.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    if as_json:
        print(json.dumps(report, default=str))
    else:
        _print_counts(c.console, report, run_dir)


def _print_counts(console, report: dict, run_dir: Path) -> None:
    for cell in report["cells"]:
        t = Table(title=f"{report['model']} {report['backend']}: cp{cell['cp_size']} bs{cell['bs']} "
                        f"seq{cell['seq_len']} attention kernels per forward")
        comm = any("comm_kernels" in r for r in cell["per_rank"])
        cols = ["rank", "two-call", "fused", "two-call other", "fused other", "two-call launches", "fused launches"]
        for col in cols + (["two-call comm", "fused comm"] if comm else []):
            t.add_column(col, justify="right")
        by = {(r["rank"], r["mode"]): r for r in cell["per_rank"]}
        for rank in sorted({r["rank"] for r in cell["per_rank"]}):
            a, b = by[(rank, "two-call")], by[(rank, "fused")]
            t.add_row(str(rank), str(a["attn_kernels"]), str(b["attn_kernels"]), str(a["other_kernels"]),
                      str(b["other_kernels"]), str(a["launches"]), str(b["launches"]),
                      *([str(a.get("comm_kernels")), str(b.get("comm_kernels"))] if comm else []))
        tot = cell["total"]
        t.add_row("all", f"[bold]{tot['two-call']}[/]", f"[bold]{tot['fused']}[/]", "", "", "", "",
                  *(["", ""] if comm else []))
        console.print(t)
    if str(report.get("device", "")).startswith("cpu") and "launch" in report:
        console.print("comm = collective (NCCL) kernels; gloo runs its collectives on the CPU, so a CPU launch "
                      "has none (and no kernels or launches at all)")
    if "nsys" in report:
        n = report["nsys"]
        console.print(escape(f"nsys: {n.get('status')} {n.get('report', '')} {n.get('reason', '')}"))
    console.print(f"traces (open in https://ui.perfetto.dev): {run_dir / 'profiles'}")


def _nsys_cross_check(argv: list[str], run_dir: Path, report: dict, backend: str) -> dict:
    """Re-run this command under nsys (child mode) and compare kernels per NVTX forward range."""
    from cpbench.bench.backends.registry import known_attention_patterns
    from cpbench.bench.store import RunDir
    from cpbench.profiles.nsys import (find_nsys, kernels_per_range, nsys_profile_argv, parse_nvtx_kern_sum,
                                       report_path, stats_argv)

    exe = find_nsys()
    if exe is None:
        return {"status": "skipped", "reason": "nsys not found (install Nsight Systems or put nsys on PATH)"}
    child = [sys.executable, "-m", "cpbench", *[a for a in argv if a not in ("--nsys", "--json")], "--nsys-child"]
    base = RunDir(run_dir).profiles / "nsys"
    proc = subprocess.run(nsys_profile_argv(base, child, exe), capture_output=True, text=True)
    if proc.returncode != 0:
        return {"status": "error", "reason": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    rep = report_path(base)
    stats = subprocess.run(stats_argv(rep, exe), capture_output=True, text=True)
    csv_path = RunDir(run_dir).profiles / "nvtx_kern_sum.csv"
    csv_path.write_text(stats.stdout)
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
