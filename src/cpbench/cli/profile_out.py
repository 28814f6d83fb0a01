"""What ``cpbench profile`` records and prints: cells it skips (with status and reason, as a sweep records
them), what its counts are (GPU kernels, or attention calls of the torch reference), and the count tables."""

from __future__ import annotations

import os
from pathlib import Path

from rich.markup import escape

from cpbench.domain.modes import Mode, Status
from cpbench.cli.tables import Col, print_table
from cpbench.domain.jsonfile import dumps

CPU_DEFAULT_EXTEND_LEN = "64"  # profile's --extend-len on CPU: a size the torch reference runs in seconds (sweep: 32,64)
# per-rank keys that count GPU work: not applicable on a CPU, where there is no kernel and no launch
GPU_ONLY = ("kernels", "launches", "other_kernels", "merge_kernels", "fill_kernels", "copy_kernels", "comm_kernels",
            "gpu_busy_us")


def write_profile(run_dir: Path, report: dict, partial: bool = False) -> None:
    """Write ``report`` as ``run_dir/profile.json``, atomically: into a temp file beside it, then ``os.replace``,
    so a kill leaves the previous version or this one, never half a file. ``partial``: written after a cell
    while the profile goes on (a kill then keeps the cells already counted); the file says ``"partial": true``
    until the last write, which drops it."""
    path = Path(run_dir) / "profile.json"
    tmp = path.with_name(path.name + ".tmp")
    text = dumps({**report, "partial": True} if partial else report, indent=2) + "\n"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def skip_reason(model, cell, device) -> str | None:
    """Why ``cell`` cannot be profiled (the status reason a sweep would record), or None.

    ``ineligible``: an extend length < 2*cp_size (SGLang runs such a batch without CP); on CPU also the
    reference's TFLOP limit (``CPBENCH_CPU_TFLOP_LIMIT``)."""
    from cpbench.domain.geometry import eligibility
    from cpbench.commands.runner import cpu_refusal

    ok, why = eligibility(cell.extend_lens, cell.cp_size)
    if not ok:
        return f"not CP-eligible ({why})"
    return cpu_refusal(model, cell) if device.type == "cpu" else None


def skipped_cell(cell, reason: str) -> dict:
    """The profile.json entry of a cell that was not profiled: ``status`` ``ineligible`` and its reason."""
    return cell.key().as_json(status=Status.INELIGIBLE, reason=reason, per_rank=[], total=None)


def counted_as(backend: str, device) -> str:
    """``"kernels"`` (GPU kernel executions of the attention kernel) or ``"calls"`` (the torch reference
    has no single attention kernel: its attention calls are counted, on any device)."""
    return "calls" if backend == "torch" or getattr(device, "type", str(device)) == "cpu" else "kernels"


def cpu_rows(rows: list[dict], device) -> list[dict]:
    """Per-rank rows with the GPU-only counts set to None on a CPU (there are no kernels or launches to
    count; 0 would read as "counted none")."""
    if getattr(device, "type", str(device)) != "cpu":
        return rows
    return [{**r, **{k: None for k in GPU_ONLY if k in r}} for r in rows]


def print_counts(console, report: dict, run_dir: Path) -> None:
    """One table per cell: attention kernels (or calls) per rank and mode, and the total over the measured
    ranks, labelled "all C ranks" only when every rank was measured."""
    cpu = str(report.get("device", "")).startswith("cpu")
    unit = report.get("counted", "kernels")
    for cell in report["cells"]:
        name = f"{report['model']} {report['backend']}: cp{cell['cp_size']} bs{cell['bs']} extend{cell['max_extend_len']}"
        if cell.get("status", Status.OK) != Status.OK:
            console.print(escape(f"{name}: {cell['status']}: {cell['reason']} (recorded in profile.json)"))
            continue
        comm = not cpu and any(r.get("comm_kernels") is not None for r in cell["per_rank"])
        cols = [Col("rank"), Col(f"two-call {unit}"), Col(f"fused {unit}")]
        if not cpu:
            cols += [Col("two-call other kernels"), Col("fused other kernels"), Col("two-call launches"),
                     Col("fused launches")] + ([Col("two-call comm"), Col("fused comm")] if comm else [])
        by = {(r["rank"], r["mode"]): r for r in cell["per_rank"]}
        rows = []
        for rank in sorted({r["rank"] for r in cell["per_rank"]}):
            a, b = by[(rank, Mode.TWO_CALL)], by[(rank, Mode.FUSED)]
            row = [str(rank), str(a["attn_kernels"]), str(b["attn_kernels"])]
            if not cpu:
                row += [str(a["other_kernels"]), str(b["other_kernels"]), str(a["launches"]), str(b["launches"])]
                row += [str(a.get("comm_kernels")), str(b.get("comm_kernels"))] if comm else []
            rows.append(row)
        tot = cell["total"]
        label = tot.get("ranks_label", "all") if tot.get("all_ranks", True) else f"sum, {tot['ranks_label']}"
        footer = [label, str(tot[Mode.TWO_CALL]), str(tot[Mode.FUSED])] + [""] * (len(cols) - 3)
        print_table(console, f"{name}: attention {unit} per forward", cols, rows, footer)
    if cpu:
        console.print(f"on CPU the backend's attention calls are counted: a CPU has no GPU kernels or "
                      f"launches{'; gloo runs its collectives on the CPU' if 'launch' in report else ''}; "
                      "`cpbench profile --from` reads these traces back by the same calls (one mode's files at a time)")
    if "nsys" in report:
        n = report["nsys"]
        console.print(escape(f"nsys: {n.get('status')} {n.get('report', '')} {n.get('reason', '')}"))
    console.print(f"traces (open in https://ui.perfetto.dev): {run_dir / 'profiles'}")
