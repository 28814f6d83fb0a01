"""``cpbench explain``'s report: two-call and fused kernels side by side, the work split, a verdict.

No torch. Inputs are ncu's kernels already grouped into attention calls (profiles.ncu.group_calls),
the layer pattern and the work split of each layer kind (spec.worksplit.split_rank). The verdict is
a few rules over those numbers (docs/design.md §9); each sentence quotes the numbers it rests on,
and says "model" where a number comes from the work split rather than from ncu.
"""

from __future__ import annotations

import math

from cpbench.domain.modes import Mode
from cpbench.results.verdicts import effect_text


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0f} %"


def _f(x, nd=1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def layer_verdict(window_left: int, two: list[dict], fused: dict, split: dict | None) -> dict:
    """Compare one layer kind: ``two`` = its prev and next call rows, ``fused`` = its combined row,
    ``split`` = the work split's ``LaunchSplit.to_json()`` per launch (prev/next/fused) or None.

    Returns ``{"window_left", "two_call_us", "fused_us", "speedup", "cause", "sentences"}``: the
    speedup is two-call / fused kernel time; ``cause`` names the first rule that holds
    (``split-kv-merge``, ``underfilled-two-call``, ``fused-extra-wave``, ``fused-imbalance``,
    ``fused-fewer-launches`` or ``none``)."""
    t2 = sum(r["total_us"] for r in two)
    tf = fused["total_us"]
    sp = t2 / tf if tf else float("nan")
    kind = "full" if window_left < 0 else f"window {window_left + 1}"
    out: list[str] = []
    cause = "none"
    m2 = sum(r["merge_kernels"] for r in two)
    if m2 > fused["merge_kernels"]:
        cause = "split-kv-merge"
        merge_us = sum(r["merge_us"] for r in two)
        out.append(f"{kind}: the two calls split KV and run {m2} merge kernel(s) ({merge_us:.1f} µs of "
                   f"{t2:.1f} µs); the fused call runs {fused['merge_kernels']} merge kernel(s) and its attention "
                   f"kernel takes {fused['duration']:.1f} µs against {sum(r['duration'] or 0 for r in two):.1f} µs "
                   "for the two attention kernels.")
    waves2 = [r.get("waves") for r in two]
    sms = fused.get("sms")
    if cause == "none" and all(w is not None and w < 1 for w in waves2) and (fused.get("waves") or 0) > max(waves2):
        cause = "underfilled-two-call"
        out.append(f"{kind}: each two-call launch fills part of the GPU ({' and '.join(f'{w:.2f}' for w in waves2)} "
                   f"waves, grids {' and '.join(str(int(r['grid'] or 0)) for r in two)} on {int(sms or 0)} SMs); the "
                   f"fused launch has {fused['waves']:.2f} waves (grid {int(fused['grid'] or 0)}).")
    if split is not None and cause == "none":
        sp_, sn, sf = split["prev"], split["next"], split[Mode.FUSED]
        if tf > t2 and sf["full_waves"] > max(sp_["full_waves"], sn["full_waves"]) and sf["tail_fill"] < 0.5:
            cause = "fused-extra-wave"
            out.append(f"{kind}: the fused launch runs a second, {sf['tail_fill']:.0%}-filled wave (model: "
                       f"{sf['waves']:.2f} waves vs {sp_['waves']:.2f} + {sn['waves']:.2f}).")
        elif tf > t2 and sf["makespan_tiles"] > sp_["makespan_tiles"] + sn["makespan_tiles"]:
            cause = "fused-imbalance"
            out.append(f"{kind}: the fused kernel takes {tf:.1f} µs against {t2:.1f} µs for both calls; in the "
                       f"work split (model) the busiest SM of the fused launch gets {sf['makespan_tiles']} KV tiles "
                       f"against {sp_['makespan_tiles']} + {sn['makespan_tiles']} in the two launches (a perfect "
                       f"split: {sf['mean_tiles']:.1f}); the planner balances its own cost per tile (2 x tile rows + "
                       "kv_len), not these tiles.")
    if cause == "none" and tf < t2:
        cause = "fused-fewer-launches"
        out.append(f"{kind}: one launch instead of two: {tf:.1f} µs against {t2:.1f} µs; occupancy "
                   f"{_pct(fused.get('occupancy_pct'))} vs {' / '.join(_pct(r.get('occupancy_pct')) for r in two)}, "
                   f"SM throughput {_pct(fused.get('sm_pct'))} vs {' / '.join(_pct(r.get('sm_pct')) for r in two)}.")
    if cause == "none":
        out.append(f"{kind}: fused {tf:.1f} µs vs two-call {t2:.1f} µs; no rule over these metrics explains the "
                   "difference.")
    return {"window_left": window_left, "two_call_us": t2, "fused_us": tf, "speedup": sp, "cause": cause,
            "sentences": out}


def build_explain(meta: dict, rows: list[dict], splits: dict[int, dict]) -> dict:
    """The explain report: ``meta`` (model, backend, cell, rank, timing, fused_order, ncu version,
    metrics), the call ``rows`` (profiles.ncu.attention_call_rows), ``splits`` (window_left -> launch -> LaunchSplit
    json) and one verdict per layer kind (:func:`layer_verdict`, first layer of each kind)."""
    verdicts = []
    for w in dict.fromkeys(r["window_left"] for r in rows):
        layer = min(r["layer"] for r in rows if r["window_left"] == w)
        two = [r for r in rows if r["mode"] == Mode.TWO_CALL and r["layer"] == layer]
        fused = next(r for r in rows if r["mode"] == Mode.FUSED and r["layer"] == layer)
        verdicts.append(layer_verdict(w, two, fused, splits.get(w)))
    return {**meta, "calls": rows, "work_split": {str(w): s for w, s in splits.items()}, "verdicts": verdicts}


def explain_markdown(rep: dict) -> str:
    """The markdown section a reviewer pastes: the verdict, the kernels side by side, the work split."""
    t2 = sum(v["two_call_us"] for v in rep["verdicts"])
    tf = sum(v["fused_us"] for v in rep["verdicts"])
    lines = [f"### Why fused {'wins' if tf < t2 else 'loses'}: {rep['model']} {rep['backend']} "
             f"cp{rep['cp_size']} bs{rep['bs']} extend{rep['max_extend_len']} rank {rep['rank']} ({rep['timing']}, "
             f"fused order {rep['fused_order']})", "",
             f"Attention kernel time for one layer of each kind: two-call {t2:.1f} µs, fused {tf:.1f} µs "
             f"(fused saves {effect_text(t2 / tf)} of the two-call time)." if tf else "", ""]
    lines += [f"- {s}" for v in rep["verdicts"] for s in v["sentences"]]
    lines += ["", "| layer | mode | call | µs | merge µs | grid | block | waves | occupancy | SM % | DRAM % | "
                  "regs | smem B |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rep["calls"]:
        smem = (r.get("smem_static") or 0) + (r.get("smem_dynamic") or 0)
        kind = "full" if r["window_left"] < 0 else f"window {r['window_left'] + 1}"
        lines.append(f"| {r['layer']} ({kind}) | {r['mode']} | {r['call']} | {_f(r['duration'])} | {_f(r['merge_us'])} "
                     f"| {_f(r['grid'], 0)} | {_f(r['block'], 0)} | {_f(r['waves'], 2)} | {_pct(r['occupancy_pct'])} "
                     f"| {_pct(r['sm_pct'])} | {_pct(r['dram_pct'])} | {_f(r['regs'], 0)} | {smem:.0f} |")
    if not rep["work_split"]:
        lines += ["", f"No work-split model for {rep['backend']}: its grid and waves above are what ncu measured."]
    lines += [] if not rep["work_split"] else ["", "Work split (model, docs/design.md §9): work items are CTAs "
                  "(flashinfer-fa2) or (head, query tile) items that flashinfer-fa3's persistent CTAs, one per SM, walk "
                  "(its ncu grid is the SM count); waves = items / (SMs x CTAs per SM); KV tiles per busiest SM are the "
                  "model's time.", "",
              "| layer | launch | segments (q, kv) | tile q x kv | split KV | work items | ncu grid | waves | last wave "
              "| KV tiles | busiest SM |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    grid = {}  # (window_left, launch) -> the measured grid of its first layer's attention kernel
    for r in rep["calls"]:
        grid.setdefault((r["window_left"], Mode.FUSED if r["call"] == "combined" else r["call"]), r.get("grid"))
    for w, launches in rep["work_split"].items():
        kind = "full" if int(w) < 0 else f"window {int(w) + 1}"
        for name, s in launches.items():
            segs = ", ".join(f"{x['label']} ({x['q_len']}, {x['kv_len']})" for x in s["segments"])
            c = s["config"]
            chunk = f"{s['kv_chunk']} tokens" if s["split_kv"] else "no"
            lines.append(f"| {kind} | {name} | {segs} | {c['cta_tile_q']} x {c['cta_tile_kv']} | {chunk} | {s['ctas']} | "
                         f"{_f(grid.get((int(w), name)), 0)} | {s['waves']:.2f} | {s['tail_fill']:.0%} | {s['tile_work']} | "
                         f"{s['makespan_tiles']} |")
    lines += [] if not rep["work_split"] else ["", "| layer | launch | segment | q tiles | KV tiles per q tile | "
                                                   "work items | KV tiles |", "|---|---|---|---:|---|---:|---:|"]
    for w, launches in rep["work_split"].items():
        kind = "full" if int(w) < 0 else f"window {int(w) + 1}"
        for name, s in launches.items():
            for x in s["segments"]:
                per = x["kv_tiles_per_q_tile"]
                shown = ", ".join(map(str, per)) if len(per) <= 8 else f"{', '.join(map(str, per[:4]))}, …, {per[-1]}"
                lines.append(f"| {kind} | {name} | {x['label']} | {x['q_tiles']} | {shown} | {x['ctas']} | "
                             f"{x['tile_work']} |")
    lines += ["", f"ncu {rep.get('ncu_version') or '?'}, metrics: {', '.join(rep.get('metrics', []))}; "
                  f"{_f(rep.get('sms'), 0)} SMs; one forward per mode, L2 not flushed, clocks not locked; outputs: "
                  f"max |fused - two-call| {_f(rep.get('diff_vs_two_call'), 4)}, max error vs the fp32 reference "
                  f"{_f(max((rep.get('max_abs_err') or {}).values(), default=None), 4)}.", ""]
    return "\n".join(lines)
