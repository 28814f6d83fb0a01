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
import subprocess
import sys
from pathlib import Path

import torch

from cpbench.domain.modes import Mode, MODES, Timing
from cpbench.kernels.check import max_abs_diff, max_abs_error
from cpbench.domain.geometry import all_ranks
from cpbench.domain.cells import CellSpec
from cpbench.errors import CpbenchInputError
from cpbench.profiles.kernels import ProfileError
from cpbench.profiles.ncu import (METRICS, attention_call_rows, check_ncu_output, group_calls, ncu_argv,
                                  parse_ncu_csv, parse_ncu_version, tiles_from_kernel_name)
from cpbench.domain.worksplit import TEMPLATES, split_rank
from cpbench.commands.prepare import CellPrep

CHILD_FILE = "explain_child.json"
WORK_SPLIT = TEMPLATES  # backend -> its FlashInfer template, whose work split domain/worksplit.py models beside ncu
NCU_TIMEOUT_S = 1800  # one forward per mode under kernel replay: minutes at most; never wait forever


def explain_label(cell: CellSpec, rank: int, mode: str, timing: str) -> str:
    """NVTX range of one profiled forward, e.g. ``"explain cp4 bs1 extend2048 r0 fused graph"``."""
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

    preps = {}
    for _, mode, work, p in CellPrep(model, device, dtype, seed, fused_order=fused_order).forwards(cell, backend, [rank]):
        preps[mode] = p  # each run once untraced (warm-up)
    diff = max_abs_diff(preps[Mode.TWO_CALL], preps[Mode.FUSED])
    errs = {m: max_abs_error(work, p) for m, p in preps.items()}  # vs the fp32 reference, sampled rows
    labels = {mode: explain_label(cell, rank, mode, timing) for mode in MODES}
    runs = {}
    for mode, p in preps.items():
        if timing == Timing.GRAPH:
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
            "kernel_patterns": list(preps[Mode.FUSED].kernel_patterns),
            "diff_vs_two_call": None if math.isnan(diff) else diff,
            "max_abs_err": {m: None if math.isnan(e) else e for m, e in errs.items()},
            "sms": torch.cuda.get_device_properties(device).multi_processor_count}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CHILD_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def run_under_ncu(exe: str, argv: list[str], run_dir: Path, spec, cell, rank: int, backend: str, timing: str,
                  fused_order: str) -> tuple[dict, list[dict], dict]:
    """Run ``cpbench <argv> --explain-child`` under ncu and read its CSV back: ``(meta, rows, splits)``, what
    report.explain_report.build_explain turns into the report. The SM count of the work split is ncu's
    (``device__attribute_multiprocessor_count``), else the one the child read from its device.
    Raises CpbenchInputError when ncu cannot read the counters or the child fails (one line)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "ncu_raw.csv"
    for stale in (log, run_dir / CHILD_FILE):  # from an earlier run into the same --out
        stale.unlink(missing_ok=True)
    child = [sys.executable, "-m", "cpbench", *argv, "--explain-child"]
    ranges = [explain_label(cell, rank, m, timing) for m in MODES]
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    try:
        proc = subprocess.run(ncu_argv(exe, child, ranges, log), capture_output=True, text=True,
                              timeout=NCU_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CpbenchInputError(f"ncu did not finish within {NCU_TIMEOUT_S} s: try a smaller cell (--layers, "
                                "--extend-len) or `cpbench profile`") from None
    text = proc.stdout + proc.stderr + (log.read_text(encoding="utf-8") if log.exists() else "")
    (run_dir / "ncu_output.txt").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    try:
        check_ncu_output(text)
    except ProfileError as e:
        raise CpbenchInputError(str(e)) from None
    info_path = run_dir / CHILD_FILE
    if proc.returncode != 0 or not info_path.exists():
        tail = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
        raise CpbenchInputError(f"the profiled child failed under ncu (exit {proc.returncode}): {tail[0][:200]} "
                                f"(full output: {run_dir / 'ncu_output.txt'})")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    try:
        kernels = parse_ncu_csv(log.read_text(encoding="utf-8"))
        pats = tuple(info["kernel_patterns"])
        n2 = len(info["calls"][Mode.TWO_CALL])
        groups = group_calls(kernels, info["calls"][Mode.TWO_CALL] + info["calls"][Mode.FUSED], pats)
    except ProfileError as e:
        raise CpbenchInputError(f"{e} (ncu CSV: {log})") from None
    by_mode = {Mode.TWO_CALL: groups[:n2], Mode.FUSED: groups[n2:]}
    rows = attention_call_rows(by_mode, list(spec.window_left_per_layer))
    sms = next((r["sms"] for r in rows if r.get("sms")), None) or info.get("sms")
    if sms is None and backend in WORK_SPLIT:
        raise CpbenchInputError(f"neither ncu nor the device reported the GPU's SM count (ncu CSV: {log})")
    g = all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)[rank]
    splits = {}
    for w in (spec.layer_kinds if backend in WORK_SPLIT else ()):  # tile sizes as the profiled kernels' names carry them (first layer of the kind)
        layer = min(r["layer"] for r in rows if r["window_left"] == w)
        named = {(Mode.FUSED if r["call"] == "combined" else r["call"]): tiles_from_kernel_name(r["kernel"])
                 for r in rows if r["layer"] == layer}
        splits[w] = {k: v.to_json() for k, v in split_rank(
            g.actual_seq_q_prev, g.kv_len_prev, g.actual_seq_q_next, g.kv_len_next, fused_order=fused_order,
            tiles={k: t for k, t in named.items() if t}, backend=WORK_SPLIT[backend], num_q_heads=spec.num_q_heads,
            num_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim, window_left=w, num_sms=int(sms),
            page_size=spec.page_size).items()}
        for k, t in named.items():
            splits[w][k]["tiles_from"] = "kernel name" if t else "default"
    meta = {"model": spec.name, "backend": backend, **cell.key().as_json(), "rank": rank, "timing": timing, "fused_order": fused_order,
            "num_layers": spec.num_layers, "ncu_version": parse_ncu_version(ver.stdout),
            "metrics": list(METRICS), "sms": sms, "diff_vs_two_call": info.get("diff_vs_two_call"),
            "max_abs_err": info.get("max_abs_err"),
            "ncu_csv": str(log)}
    return meta, rows, splits
