"""The forwards ``cpbench explain`` profiles: one rank of one cell, two-call then fused, once each.

The child process (run under ncu by the CLI) prepares both modes, runs each once untraced (JIT load,
caches; outside any NVTX range, so ncu skips it), checks fused against two-call, then runs each once
inside an NVTX range named by :func:`explain_label` (eager: the usual cell > layer > call ranges;
graph: one range around the graph replay). It writes what the parent needs to read ncu's rows
back: the attention calls in launch order and the backend's kernel-name patterns.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from cpbench.kernels.backends import get_backend
from cpbench.kernels.check import max_abs_diff, max_abs_error
from cpbench.spec.geometry import all_ranks, eligibility
from cpbench.run.runner import DTYPES, CellSpec
from cpbench.results.schema import MODES
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.errors import CpbenchInputError

CHILD_FILE = "explain_child.json"


def explain_label(cell: CellSpec, rank: int, mode: str, timing: str) -> str:
    """NVTX range of one profiled forward, e.g. ``"explain cp4 bs1 seq2048 r0 fused graph"``."""
    return f"explain {cell.label()} r{rank} {mode} {timing}"


def run_explain_child(model, cell: CellSpec, rank: int, *, backend: str, device: torch.device, dtype: str,
                      timing: str, fused_order: str, out_dir: Path, seed: int = 0) -> dict:
    """Run rank ``rank``'s two-call and fused forwards once each inside their NVTX ranges and write
    ``out_dir/explain_child.json``: ``{"labels": {mode: range}, "calls": {mode: [call names in launch
    order]}, "kernel_patterns": [...], "diff_vs_two_call": float, "max_abs_err": {mode: float}}`` (the
    errors against the fp32 reference, as the sweep's correctness gate). Returns that dict.

    Raises:
        CpbenchInputError: an ineligible cell, a rank outside it, or a backend that cannot run here.
    """
    from cpbench.measure.timing import capture_graph, release_graphs
    from cpbench.profiles.ranges import annotated_forward, nvtx_range

    ok, why = eligibility(cell.extend_lens, cell.cp_size)
    if not ok:
        raise CpbenchInputError(f"{cell.label()} is not CP-eligible: {why}")
    if not 0 <= rank < cell.cp_size:
        raise CpbenchInputError(f"--rank {rank} is not a rank of cp_size {cell.cp_size}: use 0..{cell.cp_size - 1}")
    be = get_backend(backend)
    why = be.supports(device, model, DTYPES[dtype])
    if why:
        raise CpbenchInputError(f"backend {backend}: {why}")
    inputs = build_cell(model, cell.extend_lens, cell.prefix_lens, page_size=model.page_size, dtype=DTYPES[dtype],
                        device=device, seed=seed)
    work = rank_work(inputs, all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)[rank], fused_order)
    preps = {mode: be.prepare(work, mode) for mode in MODES}
    for p in preps.values():
        p.forward()  # untraced warm-up
    torch.cuda.synchronize(device)
    diff = max_abs_diff(preps["two-call"], preps["fused"])
    errs = {m: max_abs_error(work, p) for m, p in preps.items()}  # vs the fp32 reference, sampled rows
    labels = {mode: explain_label(cell, rank, mode, timing) for mode in MODES}
    runs = {}
    for mode, p in preps.items():
        if timing == "graph":
            replay, rng = capture_graph(p.forward), nvtx_range(labels[mode])

            def run(replay=replay, rng=rng) -> None:
                with rng:
                    replay()
            runs[mode] = run
        else:
            runs[mode] = annotated_forward(p, labels[mode], nvtx_on=True, record_functions=False)
    torch.cuda.synchronize(device)
    for mode in MODES:
        runs[mode]()
        torch.cuda.synchronize(device)
    release_graphs()
    info = {"labels": labels,
            "calls": {m: [s.name for layer in p.layers for s in layer if s.kind == "attention"] for m, p in preps.items()},
            "kernel_patterns": list(preps["fused"].kernel_patterns),
            "diff_vs_two_call": None if math.isnan(diff) else diff,
            "max_abs_err": {m: None if math.isnan(e) else e for m, e in errs.items()}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CHILD_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info
