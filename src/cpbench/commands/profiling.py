"""Kernel counts per rank and mode for a few cells (`cpbench profile`), and the nsys child run.

Each forward is run once un-profiled (JIT load, caches), then profiled with torch.profiler
(``runner.count_kernels``): attention kernels are GPU executions matched by the backend's kernel
names (the torch reference counts attention calls). Under nsys the same forwards run once each,
NVTX-annotated, inside one cudaProfilerStart/Stop capture range.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from cpbench.domain.modes import Mode, MODES, Status
from cpbench.measure.rank import forward_label
from cpbench.commands.runner import count_kernels
from cpbench.domain.cells import CellSpec
from cpbench.commands.prepare import CellPrep


def profile_cell(model, cell: CellSpec, *, backend: str, device: torch.device, dtype: str = "bf16",
                 seed: int = 0, ranks: list[int] | None = None, trace_dir: Path | None = None,
                 context_len: int | None = None) -> list[dict]:
    """Kernel-count rows (one per rank and mode) of one cell; Chrome traces go to ``trace_dir``.

    Row keys: ``rank, mode, label, attn_kernels, attn_kernels_expected, kernels_per_call, attn_calls,
    other_kernels, kernels, launches`` (+ ``trace``). Raises CpbenchInputError for an ineligible cell
    or an unsupported backend (:meth:`CellPrep.forwards`); ProfileError when no attention work is seen.
    """
    rows = []
    for r, mode, _, prep in CellPrep(model, device, dtype, seed, context_len).forwards(cell, backend, ranks):
        label = forward_label(cell.label(), r, mode)
        counts = count_kernels(prep, label.removesuffix(" eager"), device, trace_dir)
        rows.append({"rank": r, "mode": mode, "label": label, **counts})
    return rows


def nsys_child(model, cells: list[CellSpec], *, backend: str, device: torch.device, dtype: str = "bf16",
               seed: int = 0, ranks: list[int] | None = None, context_len: int | None = None) -> None:
    """Run every (cell, rank, mode) forward once, NVTX-annotated, inside one profiler capture range."""
    from cpbench.profiles.nsys import cuda_profiler_range
    from cpbench.profiles.ranges import annotated_forward

    forwards = []
    for cell in cells:
        for r, mode, _, prep in CellPrep(model, device, dtype, seed, context_len).forwards(cell, backend, ranks):
            payload = cell.key().as_json(rank=r)
            forwards.append((prep, annotated_forward(prep, forward_label(cell.label(), r, mode), payload, nvtx_on=True)))
    torch.cuda.synchronize()
    with cuda_profiler_range():
        for _, fwd in forwards:
            fwd()
        torch.cuda.synchronize()


def totals(rows: list[dict], cp_size: int) -> dict:
    """Attention kernels summed over the measured ranks per mode, with which ranks they are, e.g.
    ``{Mode.TWO_CALL: 288, Mode.FUSED: 144, "ranks": [0, 1, 2, 3], "all_ranks": True, "ranks_label": "all 4 ranks"}``;
    with ``--ranks 0`` of cp_size 4: ``"all_ranks": False, "ranks_label": "rank 0 only (1 of 4)"`` (a sum
    over one rank, not the all-rank count)."""
    from cpbench.results.critical_path import ranks_label

    out: dict = {m: 0 for m in MODES}
    for r in rows:
        out[r["mode"]] += int(r["attn_kernels"])
    ranks = sorted({int(r["rank"]) for r in rows})
    out.update(ranks=ranks, all_ranks=ranks == list(range(cp_size)), ranks_label=ranks_label(ranks, cp_size))
    return out


def profile_ranks(cfg, cells: list[CellSpec], group, *, trace_dir: Path,
                  on_cell: Callable[[dict], None] | None = None) -> list[dict]:
    """Kernel counts per rank of a torchrun launch: each process profiles its own rank's forwards (one
    Chrome trace per rank and mode, with torch.distributed's rank info in it), measuring ``cells`` through the
    sweep's Runner as ``cfg`` (a :class:`~cpbench.commands.config.SweepConfig`; the profile command builds it)
    says; rank 0 gets ``[{cp_size, bs, max_extend_len, extend_lens, per_rank: [...], total}]`` (other ranks: []).
    ``on_cell(entry)`` is called on rank 0 with each cell's entry as soon as the cell is done (so a launch
    killed part-way keeps the cells it finished: cli/profile.py writes profile.json there).

    Each per-rank row (a sweep row) adds ``comm_kernels_expected`` (layers x collectives per layer on NCCL: 1
    packed, 2 separate; 0 on gloo, whose collectives run on the CPU) and ``comm_check`` (the two agree).

    A cell that failed on a rank (an exception or out of memory there; the ranks agree on it, as in a
    sweep) is returned with ``status`` ``error`` or ``oom``, the sweep row's ``reason`` (it names the
    failed rank) and empty ``per_rank``; the other cells are profiled as usual.
    """
    from cpbench.commands.runner import Runner

    rows: list[dict] = []
    runner = Runner(cfg, rows.extend, trace_dir=trace_dir, group=group)
    per_collective = {"packed": 1, "separate": 2}.get(cfg.gather, 0) if cfg.device.type == "cuda" else 0
    out = []
    for cell in cells:
        runner.run_cell(cell)
        if group.writes_rows:
            out.append(_cell_entry(cfg.model, cell, rows, per_collective))
            if on_cell is not None:
                on_cell(out[-1])
    return out


def _cell_entry(model, cell: CellSpec, rows: list[dict], per_collective: int) -> dict:
    """Rank 0's profile entry of ``cell`` from the sweep rows written so far (:func:`profile_ranks`)."""
    key = cell.key().row_columns()
    # plain dicts: a profile row adds the forward's label and the communication check to the sweep row
    mine = [dict(r) for r in rows if (r["cp_size"], r["extend_lens"]) == (key["cp_size"], key["extend_lens"])]
    entry = cell.key().as_json()
    failed = [r for r in mine if r["status"] != Status.OK]
    if failed:
        return {**entry, "status": failed[0]["status"], "reason": failed[0]["reason"], "per_rank": [], "total": None}
    for r in mine:
        r["label"] = forward_label(cell.label(), r["rank"], r["mode"])
        r["comm_kernels_expected"] = model.num_layers * per_collective
        r["comm_check"] = r.get("comm_kernels") == r["comm_kernels_expected"]
    return {**entry, "status": Status.OK, "per_rank": mine, "total": totals(mine, cell.cp_size)}
