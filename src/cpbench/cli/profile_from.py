"""``cpbench profile --from TRACE...``: an engine's own traces (torch.profiler per rank, or an nsys report)
read without a GPU: prefill forwards, attention kernels per forward and per layer, the fused/two-call
verdict per rank, and, with ``--cell``, the engine's per-layer kernel time beside cpbench's cell."""

from __future__ import annotations

import re

from pathlib import Path

from cpbench.domain.modes import Mode, Status, Timing
from cpbench.cli import options as c
from cpbench.cli.cells import check_not_written, check_out
from cpbench.cli.profile_out import write_profile
from cpbench.cli.profile_from_out import print_cell, print_ranks
from cpbench.domain.jsonfile import dumps
from cpbench.errors import CpbenchInputError

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


def user_cp(cp: str | None, target: tuple[int, int, int] | None) -> tuple[int | None, str]:
    """The CP size the user says the engine ran (``--cp N``, else ``--cell``'s) and how it was given, or
    ``(None, "")``. Raises CpbenchInputError: ``--cp`` not one integer >= 1, or a ``--cell`` of another cp size."""
    if cp is None:
        return (target[0], f"--cell cp{target[0]}") if target else (None, "")
    text = cp.strip()
    if not text.isdigit() or int(text) < 1:
        raise CpbenchInputError(f"--cp {cp!r} with --from: give the CP size the engine ran, one integer >= 1 (e.g. "
                                "--cp 4; 1 for a run without CP)")
    if target and target[0] != int(text):
        raise CpbenchInputError(f"--cp {int(text)} and --cell cp{target[0]} disagree on the engine's CP size: give one")
    return int(text), f"--cp {int(text)}"


def layer_split(spec, named: bool) -> tuple[bool, str]:
    """Whether per-layer times are split into window and full layers, and why (a phrase): only for a model the
    user named that has sliding-window layers; the default model's windows say nothing of the engine's."""
    windowed = sum(w >= 0 for w in spec.window_left_per_layer)
    if not named:
        return False, "no model named: give --model (or --model-config) to split window and full layers"
    if not windowed:
        return False, f"{spec.name} has no sliding-window layer"
    return True, f"{spec.name} has a sliding window on {windowed} of {spec.num_layers} layers"


def profile_from(paths: list[str], spec, *, forward_range: str | None, cell: str | None, run: str | None,
                 as_json: bool, device: str | None = None, cp: str | None = None, model_named: bool = True,
                 out: str | None = None) -> int:
    """Read the traces, print (or ``--json``) per rank, and compare with a cpbench cell. ``cp``: the engine's CP
    size as the user gives it (``--cp``), the evidence of CP the fused/two-call verdict needs besides what the
    trace shows (:mod:`cpbench.studies.engine_traces.verdict`). ``model_named``: the user named ``spec``'s model
    (``--model``, ``--model-config``, ``--window``); only then, or beside a ``--cell`` of it, are the layers split
    into window and full ones (where the model has sliding windows). ``out``: a directory to write the report to, as
    ``profile.json`` (refused where one is already). Returns the exit
    code: 0, or 1 when no rank has an attention kernel cpbench recognises (a backend's, or one of
    :data:`cpbench.profiles.kernels.ENGINE_ATTENTION`). Raises CpbenchInputError (exit 2) for
    bad input: unreadable or mixed traces, a bad ``--cell`` or ``--forward-range``, a run without the cell."""
    from cpbench.kernels.backends.registry import BACKEND_NAMES, kernel_patterns
    from cpbench.studies.engine_traces.forwards import STEP_RANGE, find_forwards, layer_times
    from cpbench.studies.engine_traces.range_check import check_forward_range
    from cpbench.studies.engine_traces.traces import read_traces
    from cpbench.studies.engine_traces.verdict import cp_evidence, verdict
    from cpbench.profiles.kernels import CALL_ATTENTION, ENGINE_ATTENTION
    from cpbench.profiles.nsys import find_nsys

    target = parse_cell(cell) if cell else None
    cp_size, cp_given = user_cp(cp, target)
    if out is not None:
        check_out(out, "no file")
        check_not_written(Path(out), "profile.json")
    traces = read_traces(paths, nsys=find_nsys())
    patterns = {**{b: kernel_patterns(b) for b in BACKEND_NAMES if kernel_patterns(b)}, **ENGINE_ATTENTION,
                **CALL_ATTENTION}
    try:
        glob = STEP_RANGE if forward_range is None else forward_range
        ranks = [find_forwards(t, patterns, spec.num_layers, glob) for t in traces]
        check_forward_range(ranks, glob, spec.num_layers, given=forward_range is not None)
    except ValueError as e:  # an empty glob, a range that matches nothing or per-layer ranges
        text = str(e)
        raise CpbenchInputError(text if text.startswith("--forward-range") else f"--forward-range: {text}") from None
    split, why = layer_split(spec, model_named or target is not None)
    windows = list(spec.window_left_per_layer) if split else None
    report = {"model": spec.name, "num_layers": spec.num_layers, "cp_size": cp_size,
              "layer_kinds": "window/full" if split else "all", "layer_kinds_reason": why, "ranks": []}
    evidence = [cp_evidence(r, spec.num_layers, cp_size, cp_given) for r in ranks]
    for r, ev in zip(ranks, evidence):
        per = r.per_forward()
        report["ranks"].append({
            "rank": r.trace.rank, "rank_source": r.trace.rank_source, "label": r.trace.label, "file": r.trace.path,
            "counted": r.trace.counted, "source": r.trace.source,
            "backend": r.backend, "cpbench_backend": r.backend if r.backend in BACKEND_NAMES else None,
            "backends": r.backends,
            "forwards": len(r.forwards), "bound": r.forwards[0].bound if r.forwards else None,
            "ranges_without_attention": r.ranges_without_attention, "ranges_matched": r.ranges_matched,
            "nested_ranges": r.nested_ranges, "malformed_kernel_events": r.trace.malformed,
            "attention_kernels_per_forward": per, "all_gathers_per_forward": [f.all_gathers for f in r.forwards],
            "cp": ev.cp, "cp_evidence": ev.why, "verdict": verdict(per, spec.num_layers, ev),
            "layer_times_us": [vars(t) for t in layer_times(r.forwards, windows)],
            "kernel_kinds": r.kernel_kinds, "unknown_kernels": r.unknown,
            "unknown_kernels_us": {n: round(us, 3) for n, us in r.unknown_us.items()}, "leftover_layers": r.leftover_layers})
    if not as_json:
        print_ranks(report)  # before the cell: a cell that cannot be read or measured loses nothing shown here
    if target:
        try:
            report["cell"] = _compare(ranks, evidence, target, spec, run, device)
        except CpbenchInputError as e:
            failed = {**report, "cell": {"status": Status.ERROR, "reason": str(e)}}
            _write(out, failed)
            if as_json:
                print(dumps(failed))
            raise
    _write(out, report)
    if as_json:
        print(dumps(report))
    elif target:
        print_cell(report["cell"])
    if not any(r.backend for r in ranks):
        c.err_console.print(f"no attention kernel cpbench recognises was found in {len(traces)} trace(s): the "
                            "unknown kernels are listed above; is this a prefill of a backend cpbench covers "
                            "(cpbench doctor lists them)?", highlight=False, soft_wrap=True)
        return 1
    return 0


def _write(out: str | None, report: dict) -> None:
    """``report`` as ``out/profile.json`` (the directory made if need be); nothing without ``out``."""
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_profile(Path(out), report)


def _compare(ranks, evidence, target: tuple[int, int, int], spec, run: str | None, device: str | None) -> dict:
    """cpbench's cell beside the engine's layer times (from ``run``, else measured here); only where every rank
    ran CP (``evidence``), so that its count names a mode."""
    from cpbench.studies.engine_traces.forwards import layer_times
    from cpbench.studies.engine_traces.compare import compare_layers, cpbench_layer_us

    from cpbench.kernels.backends.registry import BACKEND_NAMES

    cp_size, bs, extend_len = target
    backend = next((r.backend for r in ranks if r.backend), None)
    if backend is not None and backend not in BACKEND_NAMES:
        return {"status": "not compared", "reason": f"the attention kernels are {backend}'s, which cpbench does not run"}
    counts = {n for r in ranks for n in r.per_forward()}
    mode = Mode.FUSED if counts == {spec.num_layers} else Mode.TWO_CALL if counts == {2 * spec.num_layers} else None
    if not all(ev.cp for ev in evidence):
        return {"status": "not compared", "reason": "a rank shows no CP, so its count names no fused or two-call mode"}
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
    return {"status": Status.OK, "cell": f"cp{cp_size} bs{bs} extend{extend_len}", "backend": backend, "mode": mode,
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
                   timings=(Timing.EAGER,), passes=1)
        result = sweep(cfg, report=False, keep_going=True)
    except CpbenchInputError as e:
        raise CpbenchInputError(f"cannot measure cp{cp_size} bs{bs} extend{extend_len} on {backend} here ({e}): "
                                "pass --run with a run of that cell made where it runs") from None
    return result.rows, f"the cell measured now ({result.path})"


__all__ = ["parse_cell", "profile_from"]
