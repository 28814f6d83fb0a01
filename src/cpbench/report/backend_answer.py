"""The report's first table: per backend, should this path fuse, and which kernel is fastest?

SGLang PR #33137 fuses the two zigzag calls only on its TRT-LLM backend. For every cell (cp, bs, tokens,
prefix, timing) and backend this table gives the fusion verdict on the critical path (two-call / fused, printed
as the share of the two-call time fused saves, with its 95 % interval: faster, slower or a tie, the rule of
:mod:`cpbench.results.verdicts`) and the best latency the backend reaches (the lower of two-call and fused, with
the slowest rank's p10–p90); the last column names the backend with the lowest best latency. A host-bound eager
cell (its latency measures the launching CPU) carries a † and its GPU-time effect.
"""

from __future__ import annotations

import math

import pandas as pd

from cpbench.domain.modes import MODES, Status, Timing
from cpbench.results.critical_path import flag
from cpbench.report.units import human_tokens
from cpbench.report.tables import HOST_MARK, answer, forward_text, md_table, ms
from cpbench.results.verdicts import effect_text
from cpbench.results.policy import host_bound_text

KEYS = ["model", "cp_size", "bs", "max_extend_len", "prefix_len", "extend_lens", "timing"]


def best_of(c: pd.Series) -> tuple[float, str, float, float]:
    """``(µs, mode, p10 µs, p90 µs)`` of the lower of a cell's two-call and fused critical-path latency
    (NaN, "" when neither ran)."""
    pairs = [(float(c.get(f"{tag}_us", math.nan)), mode, c.get(f"p10_{tag}_us", math.nan), c.get(f"p90_{tag}_us", math.nan))
             for tag, mode in ((m.tag, m) for m in MODES)]
    pairs = [p for p in pairs if math.isfinite(p[0])]
    return min(pairs) if pairs else (math.nan, "", math.nan, math.nan)


def _fuse_text(c: pd.Series) -> str:
    if c["status"] != Status.OK or not math.isfinite(float(c["speedup"])):
        return c["status"] if c["status"] != Status.OK else "—"
    text = answer(c)
    if c["timing"] == Timing.EAGER and flag(c.get("host_bound")):
        text += f" {HOST_MARK} (GPU time {effect_text(c.get('gpu_speedup', math.nan))})"
    return text


def _forward_of(forward: pd.DataFrame, c0: dict, backend: str) -> str:
    """The breakable answer of the cell ``c0`` (any timing) on ``backend``, or "not run"."""
    sel = forward[forward["backend"] == backend]
    for k in KEYS:
        if k != "timing" and k in sel:
            sel = sel[sel[k] == c0[k]]
    return forward_text(sel.iloc[0]) if len(sel) else "not run"


def _best_text(c: pd.Series) -> str:
    us, mode, p10, p90 = best_of(c)
    if not math.isfinite(us):
        return "—"
    spread = f" [{ms(p10)}–{ms(p90)}]" if math.isfinite(float(p10)) and math.isfinite(float(p90)) else ""
    return f"{ms(us)}{spread} {mode}"


def backend_answer(view: pd.DataFrame) -> list[str]:
    """Markdown lines of the per-backend answer for a critical-path view (``report.data.cells``): a
    sentence, the table (one row per cell, per backend "fuse?" and "best ms", then the fastest
    backend), and the host-bound footnote when a cell carries the mark. Empty for an empty view."""
    if view.empty:
        return []
    backends = sorted(set(view["backend"]))
    forward = view[view["timing"] == Timing.BREAKABLE] if "timing" in view else view.iloc[0:0]
    attention = view[view["timing"] != Timing.BREAKABLE] if len(forward) < len(view) else view
    rows, marked = [], False
    order = {Timing.GRAPH: 0, Timing.EAGER: 1}  # attention alone: CUDA-graph (kernel) time first, then eager
    groups = sorted(attention.groupby(KEYS, sort=True, dropna=False),
                    key=lambda kv: (*kv[0][:-1], order.get(kv[0][-1], 2)))
    for key, g in groups:
        c0 = dict(zip(KEYS, key))
        row = [c0["cp_size"], c0["bs"], human_tokens(c0["max_extend_len"]) + (f" + {human_tokens(c0['prefix_len'])} prefix"
                                                                      if c0["prefix_len"] > 0 else ""), c0["timing"]]
        best = {}
        for b in backends:
            sel = g[g["backend"] == b]
            if sel.empty:
                row += ["not run", "—"]
                continue
            c = sel.iloc[0]
            fuse = _fuse_text(c)
            marked |= HOST_MARK in fuse
            if len(forward):  # the forward's answer first
                row.append(_forward_of(forward, c0, b))
            row += [fuse, _best_text(c)]
            us = best_of(c)[0]
            if math.isfinite(us):
                best[b] = us
        if len(best) > 1:
            ranked = sorted(best, key=best.get)
            row.append(f"{ranked[0]} ({effect_text(best[ranked[1]] / best[ranked[0]])} vs {ranked[1]})")
        elif len(backends) > 1:
            row.append(next(iter(best), "—"))
        rows.append(row)
    heads = ["cp>", "bs>", "tokens", "timing"]
    for b in backends:
        heads += [f"{b}: prefill forward (breakable)"] if len(forward) else []
        heads += [f"{b}: fuse? (fused saves, % of two-call)", f"{b}: best ms [p10–p90]"]
    heads += ["fastest backend"] if len(backends) > 1 else []
    intro = ("Per backend: does fusing the two zigzag calls pay (the share of the two-call time fused saves on the "
             "critical path, + saves, − costs, with its 95 % interval; a tie when it contains 0), and the lowest "
             "latency each backend reaches (the faster of its two modes, ms per forward, slowest rank's p10–p90)"
             + (", then the backend with the lowest one and the share of the next one's time it saves."
                if len(backends) > 1 else "."))
    if len(forward):
        kinds = "forward_rule" in forward and (forward["forward_rule"] == "kinds").any()
        intro += (" The prefill forward column, first, answers the question for the whole forward as SGLang runs "
                  "it (breakable CUDA graphs: the rest of every layer replayed, attention eager): the share of the "
                  "two-call forward the fusion saves (+) or costs (−), its 95 % interval, the ms on the critical "
                  "path, and whether the host was hidden behind the GPU (see Prefill forward below)"
                  + (", estimated from one layer of each kind (window, full) timed many times: layers x its time, "
                     "summed over kinds (`--forward-layers kinds`). `--forward-layers all` times every layer; on an "
                     "H200 the two agreed within 1.0 % at one SM clock in all 8 default cells, and runs made minutes "
                     "apart differed by the clock the GPU settled at, up to 3 % in ms (cpbench's "
                     "docs/evidence/h200-forward-kinds.md)."
                     if kinds else "."))
    out = [intro, "", md_table(heads, rows), ""]
    if marked:
        out += [f"{HOST_MARK} host-bound eager cell: its latency exceeds {host_bound_text()} the GPU busy time, so the eager effect "
                "measures how fast the CPU launches; the GPU-time effect beside it is the kernel's answer.", ""]
    return out
