"""Report sections for workloads as deployments see them (pandas only): when to fuse, by backend, timing
mode, TP and CP size over (bs, length); the share of requests SGLang would run with CP; and fused vs
two-call by layer kind (window / full layers)."""

from __future__ import annotations

import math

import pandas as pd

from cpbench.domain.modes import Mode, MODES, Status, Timing
from cpbench.domain.eligibility import DEFAULT_RULE, CpRule
from cpbench.results.critical_path import flags
from cpbench.report.units import human_tokens
from cpbench.report.tables import HOST_MARK, answer, md_table, ms, verdict
from cpbench.results.verdicts import effect_text

MAX_LENGTH_COLUMNS = 6  # more distinct lengths than this (a length mix): columns become power-of-two bins


def _length_bins(lengths: list[int]) -> dict[int, str]:
    """Column label of each length: the length itself (``8K``), or for many lengths its power-of-two bin
    (``≤ 8K``: longest extend in ``(4K, 8K]``)."""
    if len(set(lengths)) <= MAX_LENGTH_COLUMNS:
        return {n: human_tokens(n) for n in lengths}
    return {n: "≤ " + human_tokens(1 << max(0, (int(n) - 1).bit_length())) for n in lengths}


def _cell_text(cells: pd.DataFrame) -> str:
    """One grid entry: ``faster +18.0 % [+16.7, +20.0]`` for one cell (the share of the two-call time fused saves,
    with its 95 % interval; ``faster +9.1 % to +23.1 %`` for several that agree), else the
    counts (``2 faster · 1 tie``); ``no CP`` when every batch is one SGLang runs without CP, ``—`` when no
    cell ran in both modes for another reason."""
    ok = cells[(cells["status"] == Status.OK) & cells["speedup"].map(lambda x: math.isfinite(float(x)))]
    if ok.empty:
        return "no CP" if len(cells) and (cells["status"] == Status.INELIGIBLE).all() else "—"
    verdicts = list(ok.apply(verdict, axis=1))
    if len(ok) == 1:
        hb = "host_bound" in ok and bool(flags(ok["host_bound"]).iloc[0]) and ok.iloc[0]["timing"] == Timing.EAGER
        return answer(ok.iloc[0]) + (f" {HOST_MARK} (GPU time {effect_text(ok.iloc[0]['gpu_speedup'])})" if hb else "")
    if len(set(verdicts)) == 1:
        lo, hi = effect_text(ok["speedup"].min()), effect_text(ok["speedup"].max())
        return f"{verdicts[0]} {lo}" if lo == hi else f"{verdicts[0]} {lo} to {hi}"
    return " · ".join(f"{verdicts.count(v)} {v}" for v in ("faster", "slower", "tie") if v in verdicts)


def when_to_fuse(view: pd.DataFrame) -> list[tuple[str, str]]:
    """``[(heading, markdown table)]`` per (model, backend, timing, tp_size, cp_size) of the critical-path
    view: rows bs, columns the longest extend length of the batch (power-of-two bins for a length mix),
    entries fused vs two-call by the speedup's 95 % interval (``tables.verdict``: faster when the interval
    lies above 1, slower below, tie otherwise) with the speedup (:func:`_cell_text`)."""
    out: list[tuple[str, str]] = []
    if view.empty:
        return out
    for (model, backend, timing, tp, cp), v in view.groupby(["model", "backend", "timing", "tp_size", "cp_size"],
                                                             sort=True):
        labels = _length_bins(sorted({int(x) for x in v["max_extend_len"]}))
        cols = list(dict.fromkeys(labels[n] for n in sorted(labels)))
        v = v.assign(_col=v["max_extend_len"].map(lambda n: labels[int(n)]))
        rows = [[bs] + [_cell_text(g[g["_col"] == c]) for c in cols] for bs, g in v.groupby("bs", sort=True)]
        out.append((f"{model} · {backend} · {timing} · tp {tp} · cp {cp}", md_table(["bs>"] + [c + ">" for c in cols],
                                                                                     rows)))
    return out


def cp_share_lines(view: pd.DataFrame, rule: CpRule = DEFAULT_RULE) -> list[str]:
    """One bullet per (model, tp_size, cp_size): requests in batches SGLang runs with CP under ``rule`` (the
    sweep's --cp-min-extend / --cp-min-tokens, which decided the rows' ``ineligible`` status) out of all
    requests, counting each batch once (not per backend or timing); cp_size 1 reads "no CP"."""
    if view.empty:
        return []
    out = []
    keys = ["model", "tp_size", "cp_size", "bs", "max_extend_len", "prefix_len", "extend_lens", "batch"]
    for (model, tp, cp), v in view.groupby(["model", "tp_size", "cp_size"], sort=True):
        skipped = v.groupby(keys[3:], sort=False)["status"].agg(lambda s: (s == Status.SKIPPED).all())
        v = v[~v.set_index(keys[3:]).index.isin(skipped[skipped].index)]  # over --max-prefill-tokens: not run
        note = (f" ({int(skipped.sum())} batch(es) over --max-prefill-tokens were not run and are not counted)"
                if skipped.any() else "")
        if v.empty:
            out.append(f"- {model} · tp {tp} · cp {cp}: no batch ran{note}.")
            continue
        if int(cp) == 1:
            out.append(f"- {model} · tp {tp} · cp 1: no CP (SGLang builds no CP strategy at cp_size 1: every batch "
                       f"is a plain prefill){note}.")
            continue
        batches = (v.groupby(keys[3:], sort=False)["status"].agg(lambda s: not (s == Status.INELIGIBLE).any())
                   .rename("with_cp").reset_index())
        total = int(batches["bs"].sum())
        with_cp = int(batches.loc[batches["with_cp"], "bs"].sum())
        out.append(f"- {model} · tp {tp} · cp {cp}: {with_cp} of {total} requests "
                   f"({100 * with_cp / total:.0f} %) in {int(batches['with_cp'].sum())} of {len(batches)} batch(es) "
                   "ran with CP" + ("" if with_cp == total else "; the others are in batches SGLang runs without CP "
                                    f"under {rule.describe(int(cp))}") + note + ".")
    return out


def layer_kind_table(d: pd.DataFrame) -> str:
    """Fused vs two-call by layer kind, from the eager rows' ``window_layers_us`` / ``full_layers_us``: per
    cell, kind and mode the largest time over ranks (ms), and two-call / fused. Empty string when no row has
    them (a model with one layer kind, or an older run)."""
    ok = d[(d["status"] == Status.OK) & (d["timing"] == Timing.EAGER)]
    if ok.empty or not pd.to_numeric(ok["window_layers_us"], errors="coerce").notna().any():
        return ""
    rows = []
    keys = ["model", "backend", "tp_size", "cp_size", "bs", "max_extend_len", "prefix_len", "extend_lens", "batch"]
    for k, g in ok.groupby(keys, sort=True):
        c = dict(zip(keys, k))
        entry = [c["model"], c["backend"], c["tp_size"], c["cp_size"], c["bs"], _tokens(c)]
        for col in ("window_layers_us", "full_layers_us"):
            by_mode = {m: pd.to_numeric(g.loc[g["mode"] == m, col], errors="coerce").max() for m in MODES}
            tc, fu = by_mode[Mode.TWO_CALL], by_mode[Mode.FUSED]
            entry += [ms(tc), ms(fu), effect_text(tc / fu) if fu > 0 else "—"]
        rows.append(entry)
    return md_table(["model", "backend", "tp>", "cp>", "bs>", "tokens>", "window two-call ms>", "window fused ms>",
                     "window: fused saves, % of two-call>", "full two-call ms>", "full fused ms>",
                     "full: fused saves, % of two-call>"], rows)


def _tokens(c: dict) -> str:
    s = human_tokens(c["max_extend_len"])
    if c["prefix_len"] > 0:
        s += f" + {human_tokens(c['prefix_len'])} prefix"
    if len(set(str(c["extend_lens"]).split(","))) > 1:
        s += f" (extend {c['extend_lens']})"
    return s


def workload_sections(view: pd.DataFrame, d: pd.DataFrame, rule: CpRule = DEFAULT_RULE) -> list[str]:
    """The report's "When to fuse" and "By layer kind" sections (markdown lines); ``rule``: the sweep's
    eligibility rule (:func:`cp_share_lines`)."""
    parts = ["## When to fuse", "",
             "Fused vs two-call on the critical path over (bs, longest extend length), by the 95 % interval of the "
             "share of the two-call time fused saves: faster when it lies above 0, slower when below 0, else a tie; "
             "the share and its interval follow. "
             "Several batches in one entry (a length mix) are counted by verdict; no CP: batches SGLang runs without "
             f"CP ({rule.describe()}).", ""]
    for heading, table in when_to_fuse(view):
        parts += [f"### {heading}", "", table, ""]
    if view.empty:
        parts += ["_No cells._", ""]
    parts += cp_share_lines(view, rule) + [""]
    table = layer_kind_table(d)
    if table:
        parts += ["## By layer kind", "",
                  "From the profiled eager forward of each rank and mode: the GPU busy time of the sliding-window "
                  "layers and of the full-attention layers, each summed over its layers (the largest over ranks, "
                  "per kind and mode), and for each kind the share of the two-call time fused saves (+: fusion gains "
                  "on that kind).", "",
                  table, ""]
    return parts
