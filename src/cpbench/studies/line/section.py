"""The report's "three points on one kernel family" section: two-call, fused and cp-native on a backend that has a
cp-native call (fa3: FlashAttention-3's ``cache_batch_idx``; flex: FlexAttention over each request), the page table
the cp-native call no longer duplicates, and, for flex, how much of fusing's effect is the call structure (flex's
own ratio) and how much the kernel (the same fusion on the run's other backends)."""

from __future__ import annotations

import math

import pandas as pd

from cpbench.domain.modes import ALL_MODES, Mode, Status, Timing

from cpbench.report.units import human_bytes, human_tokens
from cpbench.report.tables import HOST_MARK, md_table, ms
from cpbench.results.critical_path import flag
from cpbench.studies.line.view import line_view
from cpbench.results.verdicts import effect_text, verdict_text


def _ratio(r: pd.Series, name: str) -> str:
    if r.get(f"{name}_status", Status.OK) != Status.OK:
        return str(r.get(f"{name}_status"))
    v, lo, hi = r.get(name, math.nan), r.get(f"{name}_ci_low", math.nan), r.get(f"{name}_ci_high", math.nan)
    text = verdict_text(v, lo, hi)
    if r.get("timing") == Timing.EAGER and flag(r.get(f"{name}_host_bound")):
        text += f" {HOST_MARK} (GPU time {effect_text(r.get(f'{name}_gpu', math.nan))})"
    return text


# What each backend's cp-native call is (results rows name the backend, not the call)
CP_NATIVE_CALL = {
    "fa3": "fa3's cp-native call is the fused call's 2·bs segments over the un-duplicated `[bs, W]` page table, each "
           "segment reading its request's row through FlashAttention-3's `cache_batch_idx` (the PR's TODO, on a "
           "shipped Hopper kernel)",
    "flex": "flex's cp-native call is one call over the rank's bs requests, each query at its position in its request, "
            "over the request's own page-table row",
}
SGLANG_FA3_PAGE_SIZE = 1  # SGLang's page size with --attention-backend fa3 unless --page-size is given
TODO_CONTEXT_TOKENS = 128 * 1024  # the context the duplicate is sized for in the TODO table


def table_bytes(bs: int, context_tokens: int, page_size: int) -> int:
    """Bytes of an int32 page table ``[bs, W]``, ``W = ceil(context_tokens / page_size)`` (SGLang sizes W from
    the context length); the fused call's duplicate adds as much again."""
    return bs * -(-context_tokens // page_size) * 4


def todo_table(bs_values, swa: bool) -> list[str]:
    """Markdown: the page table, its row duplicate (what the fused call allocates and fills per forward) and what
    the cp-native call saves (the duplicate), at SGLang's fa3 page size (1) and at 64, for a 128K-token context,
    per bs. ``swa``: the run kept a separate SWA pool (``--swa-pool``), whose table has the same shape (its
    duplicate counted too)."""
    tables = 2 if swa else 1
    rows = [[ps, bs, human_bytes(tables * table_bytes(bs, TODO_CONTEXT_TOKENS, ps)),
             human_bytes(2 * tables * table_bytes(bs, TODO_CONTEXT_TOKENS, ps)),
             human_bytes(tables * table_bytes(bs, TODO_CONTEXT_TOKENS, ps))]
            for ps in (SGLANG_FA3_PAGE_SIZE, 64) for bs in sorted({int(b) for b in bs_values})]
    what = "the full and the SWA pool's tables" if swa else "the page table; with `--swa-pool` the SWA pool's doubles it"
    return [f"The duplicated page table, computed for a {human_tokens(TODO_CONTEXT_TOKENS)}-token context ({what}; "
            f"int32, one row per request): at page size {SGLANG_FA3_PAGE_SIZE} (SGLang's with fa3) a row holds one "
            "entry per token.", "",
            md_table(["page size", "bs", "table [bs, W]", "fused: [2·bs, W]", "cp-native saves"], rows), ""]


# each effect column of the table: its column in studies.line.view.line_view, its head, and the two modes it needs
EFFECTS = (("fused_vs_two_call", "fused saves, % of two-call", (Mode.TWO_CALL, Mode.FUSED)),
           ("native_vs_two_call", "cp-native saves, % of two-call", (Mode.TWO_CALL, Mode.CP_NATIVE)),
           ("native_vs_fused", "cp-native saves, % of fused", (Mode.FUSED, Mode.CP_NATIVE)))


def line_section(d: pd.DataFrame, view: pd.DataFrame, cpu: bool = False) -> list[str]:
    """Markdown lines; empty when the run holds no cp-native row. A mode the run did not measure (``--modes``) has no
    latency column and no effect column. ``view``: the run's critical-path view (results.critical_path), to set flex's
    fused-vs-two-call effect beside the other backends' on the same cells."""
    line = line_view(d)
    if line.empty:
        return []
    ran = [m for m in ALL_MODES if (d["mode"] == m).any()]  # a mode the run did not measure gets no column
    pairs = [(name, head) for name, head, (first, second) in EFFECTS if first in ran and second in ran]
    heads = (["backend", "cp", "bs", "extend", "timing"] + [f"{m} ms" for m in ran] + [h for _, h in pairs]
             + ["page table: fused / cp-native"])
    rows = []
    for _, r in line.sort_values(["backend", "timing", "cp_size", "bs", "max_extend_len"]).iterrows():
        mem = "not measured (CPU)" if cpu or not math.isfinite(float(r.get("page_table_fused_bytes", math.nan))) else \
            f"{human_bytes(r['page_table_fused_bytes'])} / {human_bytes(r['page_table_cp_native_bytes'])}"
        rows.append([r["backend"], int(r["cp_size"]), int(r["bs"]), human_tokens(r["max_extend_len"]), r["timing"],
                     *[ms(r.get(f"{m.tag}_us")) for m in ran],
                     *[effect_text(r.get(n)) if cpu else _ratio(r, n) for n, _ in pairs], mem])
    natives = "; ".join(CP_NATIVE_CALL.get(b, f"{b}'s cp-native call") for b in sorted(set(line["backend"])))
    out = ["## Three points on one kernel family", "",
           "Two calls per layer, the PR's fused call over 2·bs segments with the row-duplicated page table, and a "
           f"CP-native call that duplicates nothing ({natives}), each on one kernel family. Latencies on the critical "
           "path; each effect is the share of one mode's time another saves (+) or costs (−)" +
           (". On a CPU these are a functional check, not a benchmark: no interval or verdict is given." if cpu else
            f", with its 95 % interval; {HOST_MARK}: a host-bound eager cell, with its GPU-time effect."), "",
           md_table(heads, rows), ""]
    if "fa3" in set(line["backend"]):
        out += ["fa3 is upstream FlashAttention-3 where `kernel_impl` says `flash_attn_interface`: it has no sinks "
                "argument, so its timed call is the kernel alone (SGLang's sgl-kernel computes the sinks inside the "
                "same launch) and the correctness check folds the sinks in afterwards from the log-sum-exp it "
                "returns. Its per-call scheduler kernel (and split-KV combine) count as merge kernels, not attention "
                "kernels.", ""]
        # a run with --swa-pool: the window layers' own table, duplicated as well
        swa = "swa_kv_buffers" in d and bool((pd.to_numeric(d["swa_kv_buffers"], errors="coerce") > 0).any())
        out += todo_table(line["bs"], swa)
    out += [] if cpu else _structure_vs_kernel(line[line["backend"] == "flex"], view)
    return out + [""]


def _structure_vs_kernel(line: pd.DataFrame, view: pd.DataFrame) -> list[str]:
    """One bullet per cell that another backend also ran: flex's fused-vs-two-call ratio (the call structure,
    one kernel family) beside each other backend's (the same structure on another kernel)."""
    if view.empty or "backend" not in view:
        return []
    keys = ["timing", "cp_size", "bs", "max_extend_len", "prefix_len"]
    out = []
    for _, r in line.iterrows():
        same = view[(view["backend"] != r["backend"]) & (view["status"] == Status.OK)]
        for k in keys:
            same = same[same[k] == r[k]]
        if same.empty:
            continue
        others = "; ".join(f"{o['backend']} {effect_text(o['speedup'], o['speedup_ci_low'], o['speedup_ci_high'])}"
                           for _, o in same.iterrows())
        out.append(f"- cp {int(r['cp_size'])} · bs {int(r['bs'])} · {human_tokens(r['max_extend_len'])} · "
                   f"{r['timing']}: fusing on {r['backend']} (structure alone) "
                   f"{effect_text(r['fused_vs_two_call'], r['fused_vs_two_call_ci_low'], r['fused_vs_two_call_ci_high'])}; "
                   f"the same fusion on {others} (structure and that kernel's handling of the synthetic batch).")
    return (["Structure or kernel: the share of the two-call time fused saves on each backend, same cells.", ""]
            + out + [""]) if out else []
