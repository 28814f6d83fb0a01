"""The report's "three points on one kernel family" section: two-call, fused and cp-native on the flex backend,
and how much of fusing's effect is the call structure (flex's own ratio) and how much the kernel (the same
fusion on the run's other backends)."""

from __future__ import annotations

import math

import pandas as pd

from cpbench.report.units import human_bytes, human_tokens
from cpbench.report.tables import HOST_MARK, md_table, ms, times
from cpbench.results.critical_path import flag
from cpbench.results.line import line_view
from cpbench.results.verdicts import ratio_text, speedup_verdict


def _ratio(r: pd.Series, name: str) -> str:
    if r.get(f"{name}_status", "ok") != "ok":
        return str(r.get(f"{name}_status"))
    v, lo, hi = r.get(name, math.nan), r.get(f"{name}_ci_low", math.nan), r.get(f"{name}_ci_high", math.nan)
    verdict = speedup_verdict(v, lo, hi)
    text = f"{verdict} {ratio_text(v, lo, hi)}" if verdict != "n/a" else ratio_text(v, lo, hi)
    if r.get("timing") == "eager" and flag(r.get(f"{name}_host_bound")):
        text += f" {HOST_MARK} (GPU time {times(r.get(f'{name}_gpu', math.nan))})"
    return text


def line_section(d: pd.DataFrame, view: pd.DataFrame, cpu: bool = False) -> list[str]:
    """Markdown lines; empty when the run holds no cp-native row. ``view``: the run's critical-path view
    (results.critical_path), to set flex's fused-vs-two-call ratio beside the other backends' on the same cells."""
    line = line_view(d)
    if line.empty:
        return []
    heads = ["backend", "cp", "bs", "extend", "timing", "two-call ms", "fused ms", "cp-native ms",
             "fused vs two-call", "cp-native vs two-call", "cp-native vs fused", "page table: fused / cp-native"]
    rows = []
    for _, r in line.sort_values(["backend", "timing", "cp_size", "bs", "max_extend_len"]).iterrows():
        mem = "not measured (CPU)" if cpu or not math.isfinite(float(r.get("page_table_fused_bytes", math.nan))) else \
            f"{human_bytes(r['page_table_fused_bytes'])} / {human_bytes(r['page_table_cp_native_bytes'])}"
        rows.append([r["backend"], int(r["cp_size"]), int(r["bs"]), human_tokens(r["max_extend_len"]), r["timing"],
                     ms(r.get("two_call_us")), ms(r.get("fused_us")), ms(r.get("cp_native_us")),
                     *([_ratio(r, n) for n in ("fused_vs_two_call", "native_vs_two_call", "native_vs_fused")]
                       if not cpu else [ratio_text(r.get(n)) for n in ("fused_vs_two_call", "native_vs_two_call",
                                                                        "native_vs_fused")]),
                     mem])
    out = ["## Three points on one kernel family", "",
           "Two calls per layer, the PR's fused call over 2·bs segments with the row-duplicated page table, and a "
           "CP-native call (one call over the rank's requests, each query at its position in its request, over the "
           "request's own page-table row: nothing duplicated), all on one kernel family. Latencies on the critical "
           "path; each ratio is the first mode's latency over the second's" +
           ("" if cpu else " (> 1: the second is faster)") +
           (". On a CPU these are a functional check, not a benchmark: no interval or verdict is given." if cpu else
            f", with its 95 % interval; {HOST_MARK}: a host-bound eager cell, with its GPU-time ratio."), "",
           md_table(heads, rows), ""]
    out += [] if cpu else _structure_vs_kernel(line, view)
    return out + [""]


def _structure_vs_kernel(line: pd.DataFrame, view: pd.DataFrame) -> list[str]:
    """One bullet per cell that another backend also ran: flex's fused-vs-two-call ratio (the call structure,
    one kernel family) beside each other backend's (the same structure on another kernel)."""
    if view.empty or "backend" not in view:
        return []
    keys = ["timing", "cp_size", "bs", "max_extend_len", "prefix_len"]
    out = []
    for _, r in line.iterrows():
        same = view[(view["backend"] != r["backend"]) & (view["status"] == "ok")]
        for k in keys:
            same = same[same[k] == r[k]]
        if same.empty:
            continue
        others = "; ".join(f"{o['backend']} {ratio_text(o['speedup'], o['speedup_ci_low'], o['speedup_ci_high'])}"
                           for _, o in same.iterrows())
        out.append(f"- cp {int(r['cp_size'])} · bs {int(r['bs'])} · {human_tokens(r['max_extend_len'])} · "
                   f"{r['timing']}: fusing on {r['backend']} (structure alone) "
                   f"{ratio_text(r['fused_vs_two_call'], r['fused_vs_two_call_ci_low'], r['fused_vs_two_call_ci_high'])}; "
                   f"the same fusion on {others} (structure and that kernel's handling of the synthetic batch).")
    return (["Structure or kernel: fused vs two-call on each backend, same cells.", ""] + out + [""]) if out else []
