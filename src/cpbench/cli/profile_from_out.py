"""What ``cpbench profile --from`` prints: the ranks table, its notes, the unknown kernels, the cell beside the
engine. The report dict is :func:`cpbench.cli.profile_from.profile_from`'s (also its ``--json``)."""

from __future__ import annotations

import math

from cpbench.domain.modes import Status
from cpbench.cli import options as c
from cpbench.cli.tables import Col, print_table

UNKNOWN_SHOWN = 8  # unknown kernel names printed on the console (--json lists every one)


def _spread(t: dict | None) -> str:
    """``median [p10-p90]`` of one LayerTimes dict, µs; ``-`` for none."""
    return f"{_ms(t['median'])} [{_ms(t['p10'])}-{_ms(t['p90'])}]" if t else "-"


def _ms(us: float) -> str:
    return "-" if us is None or (isinstance(us, float) and math.isnan(us)) else f"{us:.1f}"


def print_ranks(report: dict) -> None:
    """The ranks table of a ``profile --from`` report, then its notes and each rank's unknown kernels."""
    con = c.console
    split = report["layer_kinds"] == "window/full"
    rows = []
    for r in report["ranks"]:
        times = {t["kind"]: t for t in r["layer_times_us"]}
        cells = [_spread(times.get("window")), _spread(times.get("full"))] if split else [_spread(times.get("all"))]
        if split and "all" in times:  # layer kinds unknown (the forward's layer count is not the model's)
            cells = [f"all layers: {_spread(times['all'])}", "-"]
        per = r["attention_kernels_per_forward"]
        rows.append([str(r["rank"]), "+".join(r["backends"]) or "unknown", f"{r['forwards']} ({r['bound'] or '-'})",
                     ",".join(map(str, sorted(set(per)))) or "-", *cells, r["verdict"]])
    times = ([Col("window layer µs median [p10-p90]"), Col("full layer µs median [p10-p90]")] if split
             else [Col("layer µs median [p10-p90]")])
    named = not report["layer_kinds_reason"].startswith("no model")
    model = f"{report['model']} ({report['num_layers']} layers)" if named else f"{report['num_layers']} layers"
    print_table(con, f"{model}: attention kernels per prefill forward",
                [Col("rank"), Col("backend", False, True), Col("forwards (bounded by)", False),
                 Col("attention kernels / forward"), *times, Col("verdict", False, True)], rows)
    notes = [] if named else [
        f"layers not split into window and full: {report['layer_kinds_reason']}"]
    source = report["ranks"][0]["rank_source"] if report["ranks"] else "distributedInfo"
    if "device" in source:
        notes.append(f"ranks are numbered in {source} (a process ran kernels on several GPUs): "
                     + ", ".join(f"rank {r['rank']} = {r['label']}" for r in report["ranks"]))
    elif source == "file name":
        notes.append("ranks are inferred from the number in each file name (the traces name none: no distributedInfo); "
                     "give one run's files, one per rank")
    elif source != "distributedInfo":
        notes.append(f"ranks are numbered in {source}: the traces name none (no distributedInfo); give one run's "
                     "files, one per rank")
    calls = [str(r["rank"]) for r in report["ranks"] if r["counted"] != "kernels"]
    if calls:
        notes.append(f"rank {', '.join(calls)}: no GPU kernel (a CPU run): its attention calls are counted, one per "
                     "prev/next/combined range of cpbench's profile")
    foreign = sorted({r["backend"] for r in report["ranks"]
                      if r["backend"] and not r["cpbench_backend"] and r["counted"] == "kernels"})
    if foreign:
        notes.append(f"attention kernels of {', '.join(foreign)}: a library cpbench does not run; counted as attention, "
                     "and no cpbench cell can be set beside them (--cell)")
    for r in report["ranks"]:
        if len(r["backends"]) > 1:
            notes.append(f"rank {r['rank']}: attention kernels of {len(r['backends'])} backends: "
                         + ", ".join(f"{b} x{n}" for b, n in r["backends"].items()))
        if r["malformed_kernel_events"]:
            notes.append(f"rank {r['rank']}: {r['malformed_kernel_events']} kernel events without a name, start or "
                         "duration (or a negative one) were left out")
        if r["nested_ranges"]:
            notes.append(f"rank {r['rank']}: {r['nested_ranges']} matched ranges lie inside other matched ranges: the "
                         "outermost are the forwards")
        if r["ranges_without_attention"]:
            notes.append(f"rank {r['rank']}: {r['ranges_without_attention']} forward ranges matched but held no "
                         "attention kernel (kernels not tied to their launch calls?): forwards found by the layer count")
    for line in notes:
        con.print(line, highlight=False, soft_wrap=True, markup=False)
    for r in report["ranks"]:
        us = r["unknown_kernels_us"]
        unknown = sorted(r["unknown_kernels"].items(), key=lambda kv: (-us.get(kv[0], 0.0), -kv[1], kv[0]))
        if unknown:
            shown = ", ".join(f"{n[:80]} x{k} ({us.get(n, 0.0) / 1e3:.2f} ms)" for n, k in unknown[:UNKNOWN_SHOWN])
            more = f", and {len(unknown) - UNKNOWN_SHOWN} more names (--json lists all)" if len(unknown) > UNKNOWN_SHOWN else ""
            con.print(f"rank {r['rank']}: kernels cpbench does not know, by GPU time: {shown}{more}", highlight=False,
                      soft_wrap=True, markup=False)
        if r["leftover_layers"]:
            con.print(f"rank {r['rank']}: {r['leftover_layers']} attention layers after the last whole forward "
                      "were not counted", highlight=False)


def print_cell(cell: dict) -> None:
    """The engine beside cpbench's cell, per rank and layer kind, or why it was not compared."""
    con = c.console
    if cell["status"] == Status.OK:
        print_table(con, f"engine vs cpbench, {cell['cell']} {cell['backend']} {cell['mode']} ({cell['source']}): "
                         "attention time per layer, µs",
                    [Col("rank"), Col("layer kind", False), Col("engine median [p10-p90]"), Col("cpbench"),
                     Col("engine / cpbench")],
                    [[str(x["rank"]), x["kind"], f"{_ms(x['engine_median_us'])} [{_ms(x['engine_p10_us'])}-"
                      f"{_ms(x['engine_p90_us'])}]", _ms(x["cpbench_us"]),
                      "-" if math.isnan(x["ratio"]) else f"{x['ratio']:.2f}"] for x in cell["layers"]])
    else:
        con.print(f"cell not compared: {cell['reason']}", highlight=False)


__all__ = ["print_cell", "print_ranks"]
