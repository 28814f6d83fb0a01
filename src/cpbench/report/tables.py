"""Markdown pieces of the report, computed from the critical-path view (no matplotlib drawing here).

Speedup = two-call / fused latency on the critical path, printed as the share of the two-call time fused saves
(:func:`cpbench.results.verdicts.effect_text`: ``+0.7 % [+0.1, +1.4]``). A cell's verdict comes from its 95 %
bootstrap interval (``speedup_ci_low/high``) by the one rule of :mod:`cpbench.results.verdicts` (faster when the
interval lies above 1, slower when below, a tie when it contains 1; without raw samples ±TIE_BAND).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cpbench.domain.modes import ALL_MODES, Mode, MODES, Status, Timing
from cpbench.results.critical_path import flag, flags
from cpbench.results.schema import CELL_COLUMNS
from cpbench.results.verdicts import effect_text, speedup_verdict, verdict_text
from cpbench.report.data import ranks_text, uniform
from cpbench.report.units import EFFECT_UNIT, human_tokens
from cpbench.domain.tolerance import reference_tolerance
from cpbench.results.policy import host_bound_text


HOST_MARK = "†"  # a host-bound eager cell: its latency measures the launching CPU (one mark in every table)


def plural(n: int, word: str) -> str:
    """``plural(1, "cell")`` -> ``"1 cell"``, ``plural(3, "cell")`` -> ``"3 cells"``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def md_escape(v) -> str:
    """Text safe inside a GitHub markdown table cell (pipes escaped, newlines flattened)."""
    return str(v).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def md_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table; numbers right-aligned when the header says so (ends with ``>``)."""
    align = ["---:" if h.endswith(">") else "---" for h in headers]
    heads = [md_escape(h.rstrip(">")) for h in headers]
    lines = ["| " + " | ".join(heads) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def ms(us: float) -> str:
    """µs -> ms text with 3-4 significant digits; NaN -> '—'."""
    if us is None or not math.isfinite(float(us)):
        return "—"
    v = float(us) / 1e3
    return f"{v:.1f}" if v >= 100 else f"{v:.2f}" if v >= 10 else f"{v:.3f}"


def times(x: float) -> str:
    """A ratio that is no effect of one path against another (kernel counts, real / simulated): 1.234 -> '1.23×';
    NaN -> '—'. An effect (a speedup) is printed by :func:`effect`."""
    return f"{x:.2f}×" if x is not None and math.isfinite(float(x)) else "—"


def effect(c) -> str:
    """A cell's fused effect: the share of the two-call time fused saves with its 95 % interval,
    ``+0.7 % [+0.1, +1.4]`` (:func:`cpbench.results.verdicts.effect_text`)."""
    return effect_text(c["speedup"], c.get("speedup_ci_low", math.nan), c.get("speedup_ci_high", math.nan))


def answer(c) -> str:
    """A cell's verdict and effect, ``faster +0.7 % [+0.1, +1.4]`` (:func:`cpbench.results.verdicts.verdict_text`)."""
    return verdict_text(c["speedup"], c.get("speedup_ci_low", math.nan), c.get("speedup_ci_high", math.nan))


def verdict(c) -> str:
    """``faster`` / ``slower`` / ``tie`` (or ``n/a``) for one cell of the critical-path view
    (:func:`cpbench.results.verdicts.speedup_verdict`)."""
    return speedup_verdict(c["speedup"], c.get("speedup_ci_low", math.nan), c.get("speedup_ci_high", math.nan))


def where(c: pd.Series, with_cp: bool = True) -> str:
    """'cp 4, bs 1, 8K tokens' (+ prefix / uneven lengths when present)."""
    s = (f"cp {c['cp_size']}, " if with_cp else "") + f"bs {c['bs']}, {human_tokens(c['max_extend_len'])} tokens"
    if c["prefix_len"] > 0:
        s += f" + {human_tokens(c['prefix_len'])} prefix"
    if not uniform(c["extend_lens"]):
        s += f" (extend {c['extend_lens']})"
    return s


def forward_text(c: pd.Series) -> str:
    """One cell's answer on the forward, in the one notation (the share of the two-call forward the fusion saves, +,
    or costs, −, with its 95 % interval: :func:`answer`) and the ms it stands for:
    ``"faster +0.9 % [+0.5, +1.3] (saves 0.22 ms of 24.70 ms)"``, ``"tie −0.2 % [−0.6, +0.3] (costs 0.06 ms ...)"``,
    or the status of a cell that did not run."""
    if c.get("status", Status.OK) != Status.OK or not math.isfinite(float(c.get("speedup", math.nan))):
        return str(c.get("status", "—")) if c.get("status", Status.OK) != Status.OK else "—"
    two, fused = float(c["two_call_us"]), float(c["fused_us"])
    host = "" if flag(c.get("host_hidden")) else ", host exposed"
    saves = (two - fused) / 1e3
    return f"{answer(c)} ({'saves' if saves >= 0 else 'costs'} {abs(saves):.2f} ms of {ms(two)} ms{host})"


def summary_lines(view: pd.DataFrame) -> list[str]:
    """One markdown bullet per (model, backend, timing): where fused wins and loses on the critical path,
    by how much (best, worst, median; first vs last sequence length), and how many cells did not run."""
    out = []
    if view.empty:
        return ["- No cells in this run."]
    for (model, backend, timing), v in view.groupby(["model", "backend", "timing"], sort=True):
        some = v[(v["status"] == Status.OK) & ~v["all_ranks"].map(lambda x: x is True or x == 1)]
        ok = v[(v["status"] == Status.OK) & v["speedup"].map(lambda x: math.isfinite(float(x)))]
        failed = len(v) - len(ok) - len(some)
        head = f"- **{model} · {backend} · {timing}** (cp {', '.join(str(c) for c in sorted(set(v['cp_size'])))}): "
        part = (f"{plural(len(some), 'cell')} measured on some ranks only ({some.iloc[0]['ranks_label']}"
                f"{' …' if len(some) > 1 else ''}), so {'it has' if len(some) == 1 else 'they have'} no "
                "critical path and no speedup" if len(some) else "")
        if ok.empty:
            why = [part] if part else []
            why += [f"{plural(failed, 'cell')} did not run on both modes (see Notes)"] if failed else []
            out.append(head + "; ".join(why) + ".")
            continue
        verdicts = ok.apply(verdict, axis=1)
        win, lose = ok[verdicts == "faster"], ok[verdicts == "slower"]
        best, worst = ok.loc[ok["speedup"].idxmax()], ok.loc[ok["speedup"].idxmin()]
        s = head + (f"fused is faster in {len(win)} of {plural(len(ok), 'cell')}" if len(win) else
                    f"fused is not faster in {'the one cell' if len(ok) == 1 else f'any of {len(ok)} cells'}")
        s += (f" (fused saves a median {effect_text(ok['speedup'].median())} of the two-call time, best "
              f"{effect_text(best['speedup'])} at {where(best)})")
        if len(lose):
            s += (f", slower in {len(lose)} (worst {effect_text(worst['speedup'])} at {where(worst)}, slowest fused "
                  f"rank {int(worst['slowest_rank_fused'])})")
        else:
            s += ", and never clearly slower"
        ties = len(ok) - len(win) - len(lose)
        s += f"; {ties} {'tie' if ties == 1 else 'ties'} (95 % interval contains 0)."
        seqs = sorted(set(ok["max_extend_len"]))
        if len(seqs) > 1:
            lo, hi = ok[ok["max_extend_len"] == seqs[0]], ok[ok["max_extend_len"] == seqs[-1]]
            s += (f" Median {effect_text(lo['speedup'].median())} at {human_tokens(seqs[0])} tokens vs "
                  f"{effect_text(hi['speedup'].median())} at {human_tokens(seqs[-1])}.")
        if failed:
            s += f" {plural(failed, 'cell')} did not run (see Notes)."
        if part:
            s += f" {part[0].upper()}{part[1:]}."
        out.append(s)
        out += host_bound_lines(ok, f"{model} · {backend} · {timing}")
    return out


def modes_text(modes) -> str:
    """How the report names the modes a run (or a group of it) measured: ``both modes`` for two-call and fused,
    ``all three modes``, else their names (``two-call``, ``fused and cp-native``)."""
    names = [str(m) for m in ALL_MODES if m in {str(x) for x in modes}]
    if names == [str(m) for m in MODES]:
        return "both modes"
    if len(names) == len(ALL_MODES):
        return "all three modes"
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + f" and {names[-1]}"


def ran_lines(d: pd.DataFrame) -> list[str]:
    """Summary bullets from the rows themselves, one per (model, backend, timing) of ``d`` (prepared rows of every
    mode): how many cells ran on every rank in the modes the group measured (:func:`modes_text`; a mode every row
    of which is ``unsupported`` is named as such and not counted), on some ranks only, or did not run. No speedup:
    the summary of a CPU run (a functional check) and of a run without both two-call and fused."""
    if d.empty:
        return ["- No cells in this run."]
    keys = [c for c in CELL_COLUMNS if c in d]
    out = []
    for (model, backend, timing), g in d.groupby(["model", "backend", "timing"], sort=True):
        modes = [m for m in ALL_MODES if (g["mode"] == m).any()]
        lacking = [str(m) for m in modes if (g.loc[g["mode"] == m, "status"] == Status.UNSUPPORTED).all()]
        counted = [m for m in modes if str(m) not in lacking]
        head = f"- **{model} · {backend} · {timing}** (cp {', '.join(str(c) for c in sorted(set(g['cp_size'])))}): "
        lack = f"{' and '.join(lacking)} {'is' if len(lacking) == 1 else 'are'} not supported by {backend}"
        if not counted:
            out.append(f"{head}{lack}: no cell ran.")
            continue
        ran = some = failed = 0
        for _, c in g[g["mode"].isin(counted)].groupby(keys, sort=False, dropna=False):
            ranks = set(range(int(c["cp_size"].iloc[0])))
            if (c["status"] != Status.OK).any():
                failed += 1
            elif all(set(c.loc[c["mode"] == m, "rank"]) == ranks for m in counted):
                ran += 1
            else:
                some += 1
        s = f"{head}{ran} of {plural(ran + some + failed, 'cell')} ran on every rank in {modes_text(counted)}"
        s += f"; {plural(some, 'cell')} on some ranks only" if some else ""
        s += f"; {plural(failed, 'cell')} did not run (see Notes)." if failed else "."
        out.append(s + (f" {lack[0].upper()}{lack[1:]}." if lacking else ""))
    return out


def reference_check_lines(rows: pd.DataFrame) -> list[str]:
    """A bullet per dtype on the output check of ``rows`` (one per rank, mode and timing): how many were
    checked, how many matched the fp32 reference, the largest ``max_abs_err`` and ``diff_vs_two_call`` and the
    tolerance they were held to (domain/tolerance.py). Empty when no row was checked (``--no-check``)."""
    out = []
    if "max_abs_err" not in rows or "dtype" not in rows:
        return out
    err = pd.to_numeric(rows["max_abs_err"], errors="coerce")
    diff = pd.to_numeric(rows.get("diff_vs_two_call", pd.Series(index=rows.index, dtype=float)), errors="coerce")
    checked = rows[err.notna() & rows["status"].isin([Status.OK, Status.MISMATCH])]
    for dtype, v in checked.groupby("dtype", sort=True):
        tols = {}  # backend -> its tolerance (a backend that folds sinks in after its kernel has a larger one)
        for backend in sorted(set(v["backend"])) if "backend" in v else []:
            try:
                tols[backend] = reference_tolerance(str(dtype), backend)
            except KeyError:
                pass
        good = int((v["status"] == Status.OK).sum())
        s = (f"- **Outputs vs the fp32 reference** ({dtype}): {good} of {plural(len(v), 'rank × mode row')} "
             f"matched; max |out − reference| {err[v.index].max():.3g}")
        if diff[v.index].notna().any():
            s += f", fused vs two-call at most {diff[v.index].max():.3g}"
        if len(set(tols.values())) == 1:
            s += f" (tolerance {next(iter(tols.values())):g})."
        elif tols:
            s += " (tolerance " + ", ".join(f"{b} {t:.4g}" for b, t in tols.items()) + ")."
        else:
            s += "."
        out.append(s)
    return out


def host_bound_lines(ok: pd.DataFrame, group: str) -> list[str]:
    """A bullet naming the host-bound eager cells of a group (latency > HOST_BOUND_RATIO x the GPU busy time of the
    profiled forward): there the eager speedup measures the launching CPU; the GPU-time speedup is
    shown beside it."""
    hb = ok[flags(ok["host_bound"])] if "host_bound" in ok else ok.iloc[0:0]
    if hb.empty:
        return []
    cells = "; ".join(f"{where(c)}: {effect_text(c['speedup'])} eager vs {effect_text(c['gpu_speedup'])} GPU time"
                      for _, c in hb.head(8).iterrows())
    more = f" (+{len(hb) - 8} more)" if len(hb) > 8 else ""
    return [f"  - Host-bound ({group}, {len(hb)} cell(s)): the eager latency exceeds {host_bound_text()} the GPU busy time, so "
            f"the eager effect measures how fast the CPU launches: {cells}{more}."]


def cell_tables(view: pd.DataFrame, cpu: bool = False) -> list[tuple[str, str]]:
    """``[(heading, markdown table)]``, one per (model, backend, timing, cp_size): bs, tokens, two-call
    ms, fused ms, speedup, slowest ranks, imbalance (slowest/fastest rank), status. ``cpu``: without the
    speedup and imbalance columns (CPU timings are a functional check)."""
    out = []
    if view.empty:
        return out
    for (model, backend, timing, cp), v in view.groupby(["model", "backend", "timing", "cp_size"], sort=True):
        prefix = bool((v["prefix_len"] > 0).any())
        partial = not v["all_ranks"].map(lambda x: x is True or x == 1).all()
        heads = ["bs>", "extend tokens>"] + (["prefix (longest)>"] if prefix else []) + (["ranks measured"] if partial else []) + [
            "two-call ms>", "fused ms>", f"{EFFECT_UNIT} [95% CI]>", "slowest rank (two-call / fused)>",
            "imbalance (two-call / fused)>", "status"]
        rows = []
        for _, c in v.iterrows():
            tok = human_tokens(c["max_extend_len"]) + ("" if uniform(c["extend_lens"]) else f" ({c['extend_lens']})")
            status = c["status"] if c["status"] == Status.OK else f"{c['status']}: {c['reason']}".rstrip(": ")
            status = status if len(status) <= 60 else status[:59] + "…"
            imb = " / ".join(f"{x:.3f}" if math.isfinite(x) else "—"
                             for x in (float(c["imbalance_two_call"]), float(c["imbalance_fused"])))
            rows.append([c["bs"], tok] + ([human_tokens(c["prefix_len"])] if prefix else [])
                        + ([c["ranks_label"]] if partial else []) + [
                ms(c["two_call_us"]), ms(c["fused_us"]), effect(c),
                ranks_text(c["slowest_rank_two_call"], c["slowest_rank_fused"]), imb, status])
        if cpu:  # drop the effect, "slowest rank", "imbalance"
            drop = {len(heads) - 4, len(heads) - 3, len(heads) - 2}
            heads = [h for i, h in enumerate(heads) if i not in drop]
            rows = [[x for i, x in enumerate(r) if i not in drop] for r in rows]
        out.append((f"{model} · {backend} · {timing} · cp {cp}", md_table(heads, rows)))
    return out


def kernel_table(counts_by_group: list[tuple[str, str, dict]], why: str = "", unit: str = "kernel") -> str:
    """Attention kernels per forward: per rank and over all ranks, two-call vs fused, one row per
    (model, backend, cp_size). ``counts_by_group``: ``[(model, backend, costs.kernel_counts(...))]``; without any,
    a line with ``why`` (``costs.counts_missing``) in ``unit`` (``call`` on a CPU) when given."""
    rows = []
    for model, backend, counts in counts_by_group:
        for cp, by in counts.items():
            tc, fu = by[Mode.TWO_CALL], by[Mode.FUSED]
            per = lambda d: "–".join(sorted({str(min(d.values())), str(max(d.values()))}, key=int)) if d else "—"
            ratio = tc["total"] / fu["total"] if fu["total"] else math.nan
            every = tc.get("all_ranks", True) and fu.get("all_ranks", True)
            where_ = fu["cell"] + ("" if every else f"; {fu['ranks_label']}, no all-rank total")
            rows.append([model, backend, cp, per(tc["per_rank"]), per(fu["per_rank"]),
                         tc["total"] if every else "—", fu["total"] if every else "—",
                         times(ratio), where_ + (" (counts vary by cell)" if tc["varies"] or fu["varies"] else "")])
    if not rows:
        return f"_No attention {unit} counts: {why}._" if why else "_No kernel counts recorded (no successful profiled cell)._"
    return md_table(["model", "backend", "cp>", "two-call / rank>", "fused / rank>", "two-call, all ranks>",
                     "fused, all ranks>", "reduction>", "measured at"], rows)


def kernel_lines(counts_by_group: list[tuple[str, str, dict]], unit: str = "kernels") -> list[str]:
    """Summary bullets: attention kernels (``unit`` "calls" on a CPU) per rank and over all ranks, two-call
    -> fused."""
    out = []
    for model, backend, counts in counts_by_group:
        for cp, by in counts.items():
            tc, fu = by[Mode.TWO_CALL], by[Mode.FUSED]
            if tc["per_rank"] and fu["per_rank"]:
                every = tc.get("all_ranks", True) and fu.get("all_ranks", True)
                out.append(f"- Attention {unit} per forward, {model} · {backend} · cp {cp}: "
                           f"{max(tc['per_rank'].values())} → {max(fu['per_rank'].values())} per rank, "
                           + (f"{tc['total']} → {fu['total']} over {len(fu['per_rank'])} ranks." if every else
                              f"measured on {fu['ranks_label']} (no all-rank total)."))
    return out


def merge_lines(df: pd.DataFrame) -> list[str]:
    """Summary bullets on split-KV merge kernels (a planner such as FlashInfer fa2's splits a segment's
    KV across CTAs when a call has too little work to fill the GPU, then merges the partial states): per
    (model, backend, cp_size) the cells where either mode launched merges, with the most per forward on
    any rank. ``df``: prepared results rows; eager rows are used (graph rows carry no counts)."""
    ok = df[(df["status"] == Status.OK) & (df["timing"] == Timing.EAGER)]
    merges = pd.to_numeric(ok["merge_kernels"], errors="coerce")
    ok = ok.assign(merge_kernels=merges)[(merges > 0) & np.isfinite(merges)]
    out = []
    for (model, backend, cp), g in ok.groupby(["model", "backend", "cp_size"], sort=True):
        found = []
        for _, c in g.groupby(["bs", "max_extend_len", "prefix_len", "extend_lens"], sort=True):
            most = {mode: int(c[c["mode"] == mode]["merge_kernels"].max()) if (c["mode"] == mode).any() else 0
                    for mode in MODES}
            found.append(f"{where(c.iloc[0], with_cp=False)}: {most[Mode.TWO_CALL]} two-call, {most[Mode.FUSED]} fused")
        out.append(f"- Split-KV merge kernels per forward, {model} · {backend} · cp {cp} (most on any rank; "
                   f"KV split across CTAs when a call is too small to fill the GPU): {'; '.join(found)}.")
    return out
