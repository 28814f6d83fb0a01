"""``cpbench explain``: why the fused call wins or loses for one cell and rank, kernel by kernel.

The command re-runs itself under Nsight Compute (``--explain-child``): the child runs the rank's
two-call and fused forwards once each inside NVTX ranges (studies/explain/measure.py); ncu profiles only the
kernels inside them and writes its raw CSV (profiles/ncu.py). The parent (run/explain.run_under_ncu)
groups the kernels into attention calls and adds the work split (domain/worksplit.py); this command writes ``explain.json``, ``explain.md``
(the verdict) and a chart (report/explain_*.py).
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from cpbench.domain.modes import Timing
from cpbench.cli import options as c
from cpbench.domain.jsonfile import dumps
from cpbench.cli.cells import backend_name, batches_of, check_not_written, check_out, parse_cells
from cpbench.errors import CpbenchInputError

EXPLAIN_EPILOG = ("Examples:  cpbench explain --cp 4 --bs 1 --extend-len 2048 --rank 0 --backend flashinfer-fa3  |  "
                  "cpbench explain --cp 4 --bs 16 --extend-len 2048 --rank 0 --backend trtllm-fmha-v2  |  "
                  "cpbench explain --cp 4 --bs 1 --extend-len 2048 --rank 0 --backend flashinfer-fa2 --timing eager "
                  "--json")
# backends whose kernels explain groups into calls (ncu metrics)
EXPLAINED = ("flashinfer-fa2", "flashinfer-fa3", "trtllm-fmha-v2")
NO_NCU = ("ncu (Nsight Compute) not found: install Nsight Compute or put ncu on PATH; "
          "`cpbench profile` counts and times kernels without it")


def explain(
    cp: Annotated[int, typer.Option("--cp", help="cp_size.")] = 4,
    bs: Annotated[Optional[str], typer.Option("--bs", help="Batch size (requests). Default: 1.")] = None,
    extend_len: Annotated[Optional[str], typer.Option(
        "--extend-len", help="Extend (new) tokens per request. Default: 2048.")] = None,
    extend_lens: c.ExtendLensOpt = None,
    seq: c.SeqAliasOpt = None,
    seq_lens: c.SeqLensAliasOpt = None,
    prefix: c.PrefixLenOpt = 0,
    rank: Annotated[int, typer.Option("--rank", help="The CP rank to explain.")] = 0,
    backend: Annotated[str, typer.Option(
        "--backend", help="flashinfer-fa2, flashinfer-fa3 or trtllm-fmha-v2 (auto: trtllm-fmha-v2 on Hopper).",
        metavar=c.backend_metavar(("auto", *EXPLAINED)))] = "auto",
    timing: Annotated[str, typer.Option(
        "--timing", help="eager or graph (one CUDA-graph replay per mode); ncu profiles kernels one at a time, so "
                         "this changes how the forward is launched, not the kernels' metrics.")] = Timing.EAGER.value,
    fused_order: c.FusedOrderOpt = "prev-next",
    dtype: Annotated[c.DType, typer.Option("--dtype")] = c.DType.bf16,
    out: Annotated[Optional[str], typer.Option("--out", help="Directory (default runs/explain-<time>).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    explain_child: Annotated[bool, typer.Option("--explain-child", hidden=True)] = False,
    model: c.ModelOpt = None, model_config: c.ModelConfigOpt = None,
    layers: Annotated[Optional[int], typer.Option(
        "--layers", help="Layers per forward (default: one of each window kind, e.g. 2 for gpt-oss).")] = None,
    heads: c.HeadsOpt = None, kv_heads: c.KvHeadsOpt = None, head_dim: c.HeadDimOpt = None,
    window: c.WindowOpt = None, sinks: c.SinksOpt = None, page_size: c.PageSizeOpt = None,
    device: c.DeviceOpt = None,
) -> None:
    """Explain fused vs two-call for one cell and rank with Nsight Compute: per attention kernel its
    duration, grid, waves, occupancy, SM and DRAM throughput, the work split (tiles and waves of prev,
    next and fused) and a verdict naming the measured cause."""
    extend_len = c.renamed(extend_len, seq, "--extend-len", "--seq")
    extend_lens = c.renamed(extend_lens, seq_lens, "--extend-lens", "--seq-lens")
    backend = c.one_backend(backend, "explain", ("auto", *EXPLAINED))
    dev = c.resolve_device(device)
    if dev.type != "cuda":
        raise CpbenchInputError("cpbench explain profiles GPU kernels with Nsight Compute and needs a CUDA GPU; "
                                "on CPU use `cpbench profile` or `cpbench sweep`")
    if timing not in (Timing.EAGER, Timing.GRAPH):
        raise CpbenchInputError(f"unknown --timing {timing!r}: use eager or graph")
    c.check_fused_order(fused_order)
    spec = c.resolve_model(model, model_config, layers, heads, kv_heads, head_dim, window, sinks, page_size)
    if layers is None:  # one layer of each window kind (gpt-oss: a window layer, then a full one)
        spec = c.resolve_model(model, model_config, len(spec.layer_kinds), heads, kv_heads, head_dim, window, sinks,
                               page_size)
    name = backend_name(backend, dev)
    if name not in EXPLAINED:
        raise CpbenchInputError(f"cpbench explain reads the kernels of {', '.join(EXPLAINED)}, not {name}: use one of "
                                "them (`cpbench profile` counts any backend's kernels)")
    if cp < 2:
        raise CpbenchInputError(f"--cp {cp}: explain compares two-call with fused, which needs cp_size >= 2")
    cells = parse_cells(cp=str(cp), bs=bs, extend_len=extend_len, extend_lens=extend_lens, prefix=prefix, ranks=str(rank),
                        default_bs="1", default_extend_len="2048")
    if len(cells.batches) != 1:
        raise CpbenchInputError("cpbench explain takes one cell: give one --bs and one --extend-len (or --extend-lens)")
    from cpbench.domain.cells import plan_cells

    cell, = plan_cells([cp], batches_of(cells, None))
    check_out(out, "runs/explain-<time>")
    from cpbench.results.store import out_dir

    run_dir = out_dir(out, "explain")
    if explain_child:
        from cpbench.studies.explain.measure import run_explain_child

        run_explain_child(spec, cell, rank, backend=name, device=dev, dtype=dtype.value, timing=timing,
                          fused_order=fused_order, out_dir=run_dir)
        return
    check_not_written(run_dir, "explain.json")
    from cpbench.commands.prepare import CellPrep

    CellPrep(spec, dev, dtype.value).check(name, cell)  # what the child would refuse, refused before ncu runs
    from cpbench.profiles.ncu import find_ncu

    exe = find_ncu()
    if exe is None:
        raise CpbenchInputError(NO_NCU)
    argv = [a for a in sys.argv[1:] if a != "--json"]
    if out is None:
        argv += ["--out", str(run_dir)]
    from cpbench.studies.explain.report import build_explain
    from cpbench.results.store import RunDir
    from cpbench.studies.explain.measure import run_under_ncu

    with RunDir(run_dir).held():  # another explain, profile or sweep writing here is refused
        rep = build_explain(*run_under_ncu(exe, argv, run_dir, spec, cell, rank, name, timing, fused_order))
        (run_dir / "explain.json").write_text(dumps(rep, indent=2) + "\n", encoding="utf-8")
        from cpbench.studies.explain.chart import explain_chart
        from cpbench.studies.explain.report import explain_markdown
        from cpbench.results.store import as_utf8

        md = explain_markdown(rep)
        (run_dir / "explain.md").write_text(as_utf8(md), encoding="utf-8")
        explain_chart(rep, run_dir)
    if as_json:
        print(dumps(rep))
    else:
        c.console.print(md, markup=False, highlight=False, soft_wrap=True)  # no wrapping: the table stays pasteable
        c.console.print(f"report: {run_dir / 'explain.md'}, chart: {run_dir / 'explain.png'}")
