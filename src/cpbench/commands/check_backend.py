"""``cpbench check-backend NAME``: the conformance run a backend's author uses (docs/backends.md), without UI.

In order: the declaration (registered, or named by its class; its module imports no torch), the class (imports,
has the protocol), ``supports()`` on every check cell's model, ``prepare()`` in every declared mode (a Prepared of
the model's layers, the mode's calls per layer, outputs shaped and typed as the queries, the declared kernel
patterns), then the check cells (commands/check_probes.py) measured as a sweep measures them (commands/runner.Runner: the
fp32 reference check, fused against two-call, eager timing, CUDA-graph timing on CUDA), and on CUDA the attention
kernels found by torch.profiler with the declared patterns. Each part gets a :class:`Verdict`; a failed part
stops the parts that need it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field

import torch

from cpbench.domain.cells import Batch
from cpbench.domain.geometry import all_ranks
from cpbench.domain.modes import Mode, Timing, Status
from cpbench.errors import CpbenchInputError, one_line
from cpbench.kernels.backends import registry
from cpbench.kernels.backends.base import Prepared
from cpbench.kernels.backends.spec import BackendSpec
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.commands.check_probes import PROBES, Probe, diagnosis
from cpbench.commands.config import SweepConfig
from cpbench.commands.runner import DTYPES, Runner

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Verdict:
    """One part of the check: ``part`` (what was checked), ``result`` (pass, fail or skip) and ``detail``."""

    part: str
    result: str
    detail: str


@dataclass
class CheckReport:
    """The verdicts of one backend on one device and dtype, and ``hints`` (what to look at when cells fail)."""

    backend: str
    device: str
    dtype: str
    verdicts: list[Verdict] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    def add(self, part: str, result: str, detail: str) -> str:
        self.verdicts.append(Verdict(part, result, detail))
        return result

    @property
    def passed(self) -> bool:
        return all(v.result != FAIL for v in self.verdicts)

    @property
    def exit_code(self) -> int:
        """0 when no part failed, else 1."""
        return 0 if self.passed else 1

    def as_json(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def check_backend(name: str, device: torch.device, dtype: str = "bf16", budget_ms: float = 20.0) -> CheckReport:
    """Check backend ``name`` (a registered name or ``pkg.mod:Class``) on ``device`` in ``dtype`` (a ``--dtype``
    name); ``budget_ms``: timing budget per cell and mode (ms).

    Raises:
        CpbenchInputError: an unknown name, a ``module:Class`` that cannot be imported, or a device the backend's
            declaration says it does not run on (check it where it runs).
    """
    report = CheckReport(name, str(device), dtype)
    lo = next((x for x in registry.left_out() if name in x.names), None)
    if lo is not None:
        report.add("declaration", FAIL, f"left out: {lo.reason} ({lo.what})")
        return report
    spec = registry.get_spec(name)
    cc = registry.device_capability(device)
    if not spec.runs_on(cc):
        here = "a CPU" if cc is None else f"compute capability {cc[0]}.{cc[1]}"
        raise CpbenchInputError(f"backend {name} runs on {spec.capability_text}; this device is {here}: run "
                                "check-backend where it runs (--device)")
    _declaration(report, spec, name)
    backend = _build(report, name)
    if backend is None or not _supports(report, backend, device, DTYPES[dtype]):
        return _skip_rest(report, "the class" if backend is None else "supports()")
    if not _protocol(report, spec, backend, device, DTYPES[dtype]):
        return _skip_rest(report, "prepare()")
    rows = _run_probes(report, spec, device, dtype, budget_ms)
    _kernels(report, spec, device, dtype)
    _timing(report, rows, cuda=device.type == "cuda")
    return report


def _declaration(report: CheckReport, spec: BackendSpec, name: str) -> None:
    modes = ", ".join(spec.modes)
    where = f"runs on {spec.capability_text}; modes {modes}; kernel patterns {', '.join(spec.kernel_patterns) or 'none'}"
    if name not in registry.backends():
        report.add("declaration", SKIP, f"named by its class, not registered ({spec.source_text}); {where}")
        return
    report.add("declaration", PASS, f"{spec.origin} of {spec.source_text}; {where}")
    module = spec.origin.partition(":")[0]
    code = "import importlib, sys; importlib.import_module(sys.argv[1]); print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        report.add("declaration imports no torch", FAIL, f"importing {module} alone failed: "
                   f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
    elif out.stdout.strip() == "True":
        report.add("declaration imports no torch", FAIL, f"importing {module} imports torch, which every cpbench "
                   "command then pays for: move the backend class to a module of its own")
    else:
        report.add("declaration imports no torch", PASS, f"{module} imports no torch")


def _build(report: CheckReport, name: str):
    try:
        backend = registry.get_backend(name)
    except CpbenchInputError as e:
        report.add("class", FAIL, str(e))
        return None
    cls = f"{type(backend).__module__}:{type(backend).__name__}"
    declared = registry.backends().get(name)
    if declared is not None and backend.name != declared.name:
        report.add("class", FAIL, f"{cls}'s name {backend.name!r} is not the declared {declared.name!r}: messages "
                   "and rows would name it two ways; make them one")
        return None
    report.add("class", PASS, f"{cls} built, name {backend.name!r}")
    return backend


def _supports(report: CheckReport, backend, device: torch.device, dtype: torch.dtype) -> bool:
    for p in PROBES:
        try:
            why = backend.supports(device, p.model(), dtype)
        except Exception as e:
            return report.add("supports()", FAIL, f"raised on the {p.name} cell's model: {one_line(e)}") == PASS
        if why is not None:
            detail = (f"refuses the {p.name} cell's model on {device}, {dtype}: {why}" if isinstance(why, str) else
                      f"returned {why!r}: it returns None (can run) or a one-line reason")
            return report.add("supports()", FAIL, detail) == PASS
    return report.add("supports()", PASS, f"None (can run) for every check cell's model on {device}") == PASS


def _calls_expected(mode: str) -> int:
    return 2 if mode == Mode.TWO_CALL else 1


def _protocol(report: CheckReport, spec: BackendSpec, backend, device: torch.device, dtype: torch.dtype) -> bool:
    """prepare() in every declared mode on rank 0 of the last check cell, one forward each."""
    p = PROBES[-1]
    model = p.model()
    cell = build_cell(model, p.extend, p.prefix, page_size=model.page_size, dtype=dtype, device=device)
    work = rank_work(cell, all_ranks(p.extend, p.prefix, p.cp)[0])
    shape = tuple(work.q.shape)
    for mode in spec.modes:
        try:
            prep = backend.prepare(work, mode)
            problem = _prepared_problem(prep, spec, model, mode, work.q)
            if problem is None:
                prep.forward()
        except Exception as e:
            problem = f"raised {one_line(e)}"
        if problem is not None:
            return report.add("prepare()", FAIL, f"{mode}: {problem} (docs/backends.md)") == PASS
    calls = ", ".join(f"{m} {_calls_expected(m)}" for m in spec.modes)
    return report.add("prepare()", PASS, f"a Prepared of {model.num_layers} layers, attention calls per layer: "
                      f"{calls}; outputs {list(shape)} {str(dtype).replace('torch.', '')}; one forward ran") == PASS


def _prepared_problem(prep, spec: BackendSpec, model, mode: str, q: torch.Tensor) -> str | None:
    if not isinstance(prep, Prepared):
        return f"returned a {type(prep).__name__}, not a cpbench Prepared"
    if len(prep.layers) != model.num_layers:
        return f"{len(prep.layers)} layers, the model has {model.num_layers}"
    calls = {sum(s.kind == "attention" for s in layer) for layer in prep.layers}
    if calls != {_calls_expected(mode)}:
        return f"{sorted(calls)} attention calls per layer, {mode} makes {_calls_expected(mode)}"
    if set(prep.outputs) != set(model.layer_kinds):
        return f"outputs keyed {sorted(prep.outputs)}, not by the layer kinds (window_left) {sorted(model.layer_kinds)}"
    for w, o in prep.outputs.items():
        if not isinstance(o, torch.Tensor) or o.shape != q.shape or o.dtype != q.dtype or o.device != q.device:
            what = f"{list(o.shape)} {o.dtype} on {o.device}" if isinstance(o, torch.Tensor) else type(o).__name__
            return f"output of kind {w} is {what}, not [tokens, Hq, D] {q.dtype} on {q.device} as the queries"
    if tuple(prep.kernel_patterns) != spec.kernel_patterns:
        return f"Prepared.kernel_patterns {prep.kernel_patterns!r} differ from the declared {spec.kernel_patterns!r}"
    return None


def _config(probe: Probe, spec: BackendSpec, device: torch.device, dtype: str, budget_ms: float,
            **fields) -> SweepConfig:
    cuda = device.type == "cuda"
    base = dict(model=probe.model(), cp_sizes=(probe.cp,), batches=(Batch(probe.extend, probe.prefix),),
                backends=(spec.name,), device=device, modes=spec.modes, dtype=dtype, budget_ms=budget_ms, warmup=1,
                rel_ci=None, profile=False, swa_pool=probe.swa_pool,
                timings=(Timing.EAGER, Timing.GRAPH) if cuda else (Timing.EAGER,))
    return SweepConfig(**{**base, **fields})


def _run(cfg: SweepConfig) -> list[dict]:
    rows: list[dict] = []
    runner = Runner(cfg, rows.extend)
    for cell in cfg.cells():
        runner.run_cell(cell)
    return rows


def _run_probes(report: CheckReport, spec: BackendSpec, device, dtype: str, budget_ms: float) -> list[dict]:
    """Each check cell measured as a sweep measures it; one verdict per cell from its eager rows."""
    all_rows, failed = [], []
    for p in PROBES:
        rows = _run(_config(p, spec, device, dtype, budget_ms))
        all_rows += rows
        eager = [r for r in rows if r["timing"] == Timing.EAGER]
        bad = next((r for r in eager if r["status"] != Status.OK), None)
        if bad is not None:
            failed.append(p.name)
            report.add(f"cell: {p.name}", FAIL, f"rank {bad['rank']} {bad['mode']}: {bad['status']}: {bad['reason']}")
            continue
        err = max((r.get("max_abs_err", math.nan) for r in eager), default=math.nan)
        diff = max((r.get("diff_vs_two_call", 0.0) for r in eager), default=0.0)
        report.add(f"cell: {p.name}", PASS, f"{p.what}: max |out - fp32 reference| {err:.2g}, fused vs two-call "
                   f"{diff:.2g} ({len(eager)} rows)")
    report.hints = diagnosis(failed)
    return all_rows


def _kernels(report: CheckReport, spec: BackendSpec, device, dtype: str) -> None:
    """On CUDA: one profiled eager forward per mode of the last check cell (measure/kernel_counts.py, as a sweep
    counts): the declared patterns must find layers x calls x kernels per call attention kernels."""
    if device.type != "cuda":
        report.add("kernel patterns", SKIP, "kernel names come from a CUDA trace (torch.profiler); this device is "
                   "the CPU")
        return
    rows = _run(_config(PROBES[-1], spec, device, dtype, 5.0, check=False, profile=True, timings=(Timing.EAGER,)))
    bad = next((r for r in rows if r["status"] != Status.OK), None)
    if bad is not None:
        report.add("kernel patterns", FAIL, f"{bad['mode']}: {bad['status']}: {bad['reason']}")
        return
    counts = ", ".join(f"{r['mode']} {r['attn_kernels']:g} ({r['kernels_per_call']:g} per call)"
                       for r in rows if r["rank"] == 0)
    what = (f"patterns {', '.join(spec.kernel_patterns)} found the attention kernels per forward: {counts}"
            if spec.kernel_patterns else f"none declared: attention counted as calls ({counts})")
    report.add("kernel patterns", PASS, what)


def _timing(report: CheckReport, rows: list[dict], cuda: bool) -> None:
    for timing in (Timing.EAGER, Timing.GRAPH):
        if timing == Timing.GRAPH and not cuda:
            report.add("timing graph", SKIP, "CUDA graphs need a CUDA device")
            continue
        these = [r for r in rows if r["timing"] == timing]
        bad = next((r for r in these if r["status"] not in (Status.OK, Status.MISMATCH)), None)
        if bad is not None:
            report.add(f"timing {timing}", FAIL, f"rank {bad['rank']} {bad['mode']}: {bad['status']}: {bad['reason']}")
            continue
        us = [r["latency_us_median"] for r in these]
        if not us:
            report.add(f"timing {timing}", FAIL, "no row was timed")
            continue
        report.add(f"timing {timing}", PASS, f"{len(these)} rows timed, median forward {min(us) / 1e3:.3g} to "
                   f"{max(us) / 1e3:.3g} ms")


def _skip_rest(report: CheckReport, failed: str) -> CheckReport:
    for part in ("cells", "kernel patterns", "timing"):
        report.add(part, SKIP, f"{failed} failed")
    return report
