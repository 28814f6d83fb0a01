"""``cpbench profile --from TRACE...``: an engine's own traces (torch.profiler per rank, or an nsys report)
read without a GPU: prefill forwards, attention kernels per forward and per layer, the fused/two-call
verdict per rank, and, with ``--cell``, the engine's per-layer kernel time beside cpbench's cell."""

from __future__ import annotations

import math
import re

from cpbench.cli import options as c
from cpbench.cli.tables import Col, print_table
from cpbench.domain.jsonfile import dumps
from cpbench.errors import CpbenchInputError

UNKNOWN_SHOWN = 8  # unknown kernel names printed on the console (--json lists every one)
_CELL = re.compile(r"\s*cp(\d+)\s+bs(\d+)\s+(?:ext|extend|seq)(\d+)\s*")  # seq: the labels of older runs


def parse_cell(text: str) -> tuple[int, int, int]:
    """``"cp4 bs1 ext8192"`` (or ``extend8192``, or ``seq8192`` as older labels read) -> ``(cp_size, bs, extend_len)``.

    Raises:
        CpbenchInputError: another form, or a value < 1.
    """
    m = _CELL.fullmatch(text or "")
    if not m or min(int(g) for g in m.groups()) < 1:
        raise CpbenchInputError(f"--cell {text!r}: give it as 'cp4 bs1 ext8192' (cp_size, batch size, extend length "
                                "in tokens, each >= 1)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def profile_from(paths: list[str], spec, *, forward_range: str, cell: str | None, run: str | None,
                 as_json: bool, device: str | None = None) -> int:
    """Read the traces, print (or ``--json``) per rank, and compare with a cpbench cell. Returns the exit
    code: 0, or 1 when no rank has an attention kernel cpbench knows. Raises CpbenchInputError (exit 2) for
    bad input: unreadable or mixed traces, a bad ``--cell`` or ``--forward-range``, a run without the cell."""
    from cpbench.kernels.backends.registry import BACKEND_NAMES, kernel_patterns
    from cpbench.profiles.engine_forwards import find_forwards, layer_times, verdict
    from cpbench.profiles.engine_trace import read_traces
    from cpbench.profiles.nsys import find_nsys

    target = parse_cell(cell) if cell else None
    traces = read_traces(paths, nsys=find_nsys())
    patterns = {b: kernel_patterns(b) for b in BACKEND_NAMES if kernel_patterns(b)}
    try:
        ranks = [find_forwards(t, patterns, spec.num_layers, forward_range) for t in traces]
    except ValueError as e:
        raise CpbenchInputError(f"--forward-range: {e}") from None  # an empty glob
    windows = list(spec.window_left_per_layer)
    report = {"model": spec.name, "num_layers": spec.num_layers, "ranks": []}
    for r in ranks:
        per = r.per_forward()
        report["ranks"].append({
            "rank": r.trace.rank, "rank_source": r.trace.rank_source, "file": r.trace.path, "source": r.trace.source,
            "backend": r.backend, "backends": r.backends,
            "forwards": len(r.forwards), "bound": r.forwards[0].bound if r.forwards else None,
            "ranges_without_attention": r.ranges_without_attention, "malformed_kernel_events": r.trace.malformed,
            "attention_kernels_per_forward": per, "verdict": verdict(per, spec.num_layers),
            "layer_times_us": [vars(t) for t in layer_times(r.forwards, windows)],
            "kernel_kinds": r.kernel_kinds, "unknown_kernels": r.unknown, "leftover_layers": r.leftover_layers})
    if not as_json:
        _print_ranks(report)  # before the cell: a cell that cannot be read or measured loses nothing shown here
    if target:
        try:
            report["cell"] = _compare(ranks, target, spec, run, device)
        except CpbenchInputError as e:
            if as_json:
                print(dumps({**report, "cell": {"status": "error", "reason": str(e)}}))
            raise
    if as_json:
        print(dumps(report))
    elif target:
        _print_cell(report["cell"])
    if not any(r.backend for r in ranks):
        c.err_console.print(f"no attention kernel cpbench knows was found in {len(traces)} trace(s): the "
                            "unknown kernels are listed above; is this a prefill of a backend cpbench covers "
                            "(cpbench doctor lists them)?", highlight=False, soft_wrap=True)
        return 1
    return 0


def _compare(ranks, target: tuple[int, int, int], spec, run: str | None, device: str | None) -> dict:
    """cpbench's cell beside the engine's layer times (from ``run``, else measured here)."""
    from cpbench.profiles.engine_forwards import layer_times
    from cpbench.report.engine_cell import compare_layers, cpbench_layer_us

    cp_size, bs, extend_len = target
    backend = next((r.backend for r in ranks if r.backend), None)
    counts = {n for r in ranks for n in r.per_forward()}
    mode = "fused" if counts == {spec.num_layers} else "two-call" if counts == {2 * spec.num_layers} else None
    if backend is None or mode is None:
        return {"status": "not compared", "reason": "the trace shows no single fused or two-call path to compare"}
    rows, source = _cell_rows(run, spec, backend, cp_size, bs, extend_len, device)
    _same_model(rows, spec, source)
    ours = cpbench_layer_us(rows, cp_size=cp_size, bs=bs, max_extend_len=extend_len, backend=backend, mode=mode,
                            window_left_per_layer=list(spec.window_left_per_layer))
    if not ours:
        raise CpbenchInputError(f"{source} has no ok eager row of cp{cp_size} bs{bs} extend{extend_len} on {backend} "
                                f"{mode}: give a run of that cell (cpbench sweep --backend {backend} --cp {cp_size} "
                                f"--bs {bs} --extend-len {extend_len} --timing eager)")
    engine = {r.trace.rank: layer_times(r.forwards, list(spec.window_left_per_layer)) for r in ranks}
    rows_out = [dict(vars(x), ratio=x.ratio) for x in compare_layers(engine, ours)]
    return {"status": "ok", "cell": f"cp{cp_size} bs{bs} extend{extend_len}", "backend": backend, "mode": mode,
            "source": source, "layers": rows_out}


def _same_model(rows, spec, source: str) -> None:
    """Refuse a run of another model or layer count than the one the traces were read as: its per-layer times
    would be divided over the wrong layers."""
    models = {str(m) for m in rows["model"].dropna().unique()} if "model" in rows else set()
    layers = {int(n) for n in rows["num_layers"].dropna().unique()} if "num_layers" in rows else set()
    if (models and spec.name not in models) or (layers and spec.num_layers not in layers):
        raise CpbenchInputError(f"{source} is a run of {', '.join(sorted(models)) or '?'} with "
                                f"{', '.join(map(str, sorted(layers))) or '?'} layers, and the traces were read as "
                                f"{spec.name} with {spec.num_layers}: pass the run's --model and --layers")


def _cell_rows(run: str | None, spec, backend: str, cp_size: int, bs: int, extend_len: int, device: str | None):
    """The rows to compare with: ``run``'s, or a one-cell eager sweep of ``backend`` measured now."""
    from cpbench.api import Run, grid, sweep

    if run:
        return Run.open(run).rows, repr(run)
    try:
        cfg = grid(spec, cp_sizes=(cp_size,), bs=(bs,), extend_lens=(extend_len,), backends=backend, device=device,
                   timings=("eager",), passes=1)
        result = sweep(cfg, report=False, keep_going=True)
    except CpbenchInputError as e:
        raise CpbenchInputError(f"cannot measure cp{cp_size} bs{bs} extend{extend_len} on {backend} here ({e}): "
                                "pass --run with a run of that cell made where it runs") from None
    return result.rows, f"the cell measured now ({result.path})"


def _ms(us: float) -> str:
    return "-" if us is None or (isinstance(us, float) and math.isnan(us)) else f"{us:.1f}"


def _print_ranks(report: dict) -> None:
    con = c.console
    rows = []
    for r in report["ranks"]:
        times = {t["kind"]: t for t in r["layer_times_us"]}
        cells = [f"{_ms(t['median'])} [{_ms(t['p10'])}-{_ms(t['p90'])}]" if t else "-"
                 for t in (times.get("window"), times.get("full"))]
        if "all" in times:  # layer kinds unknown (the forward's layer count is not the model's)
            t = times["all"]
            cells = [f"all layers: {_ms(t['median'])} [{_ms(t['p10'])}-{_ms(t['p90'])}]", "-"]
        per = r["attention_kernels_per_forward"]
        rows.append([str(r["rank"]), "+".join(r["backends"]) or "-", f"{r['forwards']} ({r['bound'] or '-'})",
                     ",".join(map(str, sorted(set(per)))) or "-", *cells, r["verdict"]])
    print_table(con, f"{report['model']} ({report['num_layers']} layers): attention kernels per prefill forward",
                [Col("rank"), Col("backend", False, True), Col("forwards (bounded by)", False),
                 Col("attention kernels / forward"), Col("window layer µs median [p10-p90]"),
                 Col("full layer µs median [p10-p90]"), Col("verdict", False, True)], rows)
    notes = []
    if report["ranks"] and report["ranks"][0]["rank_source"] != "distributedInfo":
        notes.append(f"ranks are numbered in {report['ranks'][0]['rank_source']}: the traces name none "
                     "(no distributedInfo); give one run's files, one per rank")
    for r in report["ranks"]:
        if len(r["backends"]) > 1:
            notes.append(f"rank {r['rank']}: attention kernels of {len(r['backends'])} backends: "
                         + ", ".join(f"{b} x{n}" for b, n in r["backends"].items()))
        if r["malformed_kernel_events"]:
            notes.append(f"rank {r['rank']}: {r['malformed_kernel_events']} kernel events without a name, start or "
                         "duration (or a negative one) were left out")
        if r["ranges_without_attention"]:
            notes.append(f"rank {r['rank']}: {r['ranges_without_attention']} forward ranges matched but held no "
                         "attention kernel (kernels not tied to their launch calls?): forwards found by the layer count")
    for line in notes:
        con.print(line, highlight=False, soft_wrap=True, markup=False)
    for r in report["ranks"]:
        unknown = sorted(r["unknown_kernels"].items(), key=lambda kv: -kv[1])
        if unknown:
            shown = ", ".join(f"{n[:80]} x{k}" for n, k in unknown[:UNKNOWN_SHOWN])
            more = f", and {len(unknown) - UNKNOWN_SHOWN} more names (--json lists all)" if len(unknown) > UNKNOWN_SHOWN else ""
            con.print(f"rank {r['rank']}: other kernels (not attention): {shown}{more}", highlight=False,
                      soft_wrap=True, markup=False)
        if r["leftover_layers"]:
            con.print(f"rank {r['rank']}: {r['leftover_layers']} attention layers after the last whole forward "
                      "were not counted", highlight=False)


def _print_cell(cell: dict) -> None:
    con = c.console
    if cell["status"] == "ok":
        print_table(con, f"engine vs cpbench, {cell['cell']} {cell['backend']} {cell['mode']} ({cell['source']}): "
                         "attention time per layer, µs",
                    [Col("rank"), Col("layer kind", False), Col("engine median [p10-p90]"), Col("cpbench"),
                     Col("engine / cpbench")],
                    [[str(x["rank"]), x["kind"], f"{_ms(x['engine_median_us'])} [{_ms(x['engine_p10_us'])}-"
                      f"{_ms(x['engine_p90_us'])}]", _ms(x["cpbench_us"]),
                      "-" if math.isnan(x["ratio"]) else f"{x['ratio']:.2f}"] for x in cell["layers"]])
    else:
        con.print(f"cell not compared: {cell['reason']}", highlight=False)


__all__ = ["parse_cell", "profile_from"]
