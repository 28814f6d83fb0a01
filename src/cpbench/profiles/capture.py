"""torch.profiler capture of one forward: kernel and launch counts, and a Perfetto-ready trace.

Method (docs/design.md §4): ``steps_warmup`` profiler warm-up steps (the first profiled step can miss
kernels while CUPTI starts; a sweep's warm-up step is one attention call, not a whole forward), then
exactly one active step; count only that step, from the same Chrome trace a user opens in Perfetto
(``trace.json.gz``).

What is counted depends on the device:

- CUDA: GPU executions from ``kernel`` / ``gpu_memset`` / ``gpu_memcpy`` events, classified by name,
  and CPU launch calls separately. With ``attention_patterns``, zero attention kernels raise
  :class:`ProfileError`; without (torch reference), attention *calls* must be seen instead.
- CPU: attention *calls*, from the ``prev`` / ``next`` / ``combined`` record_function ranges that
  :func:`cpbench.profiles.ranges.annotated_forward` emits; zero calls raise :class:`ProfileError`.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from cpbench.profiles.forward import ForwardLike
from cpbench.profiles.kernels import KernelCounts, ProfileError, count_events, expected_attention_kernels
from cpbench.profiles.ranges import annotated_forward


def gz_trace_path(path: Path | str) -> Path:
    """``path`` ending in ``.json.gz`` (``x.json`` -> ``x.json.gz``, ``x`` -> ``x.json.gz``): the
    name :func:`profile_forward` writes to; torch gzips when the name ends in ``.gz``."""
    p = Path(path)
    if p.name.endswith(".json.gz"):
        return p
    return p.with_name(p.name + (".gz" if p.name.endswith(".json") else ".json.gz"))


def load_trace(path: Path | str) -> list[dict]:
    """``traceEvents`` of a Chrome trace file (``.json`` or ``.json.gz``); a bare list is accepted.

    Raises:
        ProfileError: the file is not a Chrome trace.
    """
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ProfileError(f"{p} is not a Chrome trace (no traceEvents list)")
    return events


def _is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def trace_events(fn: Callable[[], None], device: str | torch.device, steps_warmup: int = 1,
                 trace_path: Path | str | None = None, warmup_fn: Callable[[], None] | None = None) -> list[dict]:
    """Run ``steps_warmup`` warm-up steps and one active step of ``fn`` under torch.profiler; return the
    active step's events.

    Each step is a call then (CUDA) a device synchronize, so every kernel of the step finishes inside
    it. A warm-up step calls ``warmup_fn`` when given (e.g. one attention call: the profiler's start-up
    is what the step absorbs, so it need not be a whole forward), else ``fn``. The trace is written to
    ``gz_trace_path(trace_path)`` when given (else to a temporary uncompressed file that is removed).
    ``fn`` should already have run once outside (JIT compilation, autotuning).
    """
    if steps_warmup < 0:
        raise ValueError("steps_warmup must be >= 0")
    cuda = _is_cuda(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if trace_path is not None:
        out = gz_trace_path(trace_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = None
    else:
        # not gzipped: torch writes a .gz line by line, which took half of a profiled forward's cost
        fd, tmp = tempfile.mkstemp(prefix="cpbench-trace-", suffix=".json")
        os.close(fd)
        out = Path(tmp)
    exported: list[Path] = []

    def ready(prof) -> None:
        prof.export_chrome_trace(str(out))
        exported.append(out)

    try:
        with warnings.catch_warnings():
            # one active step is the point: torch's "clears events at the end of each cycle" is noise,
            # and so is "won't be using warmup" when the caller asked for none (CPU: nothing to miss)
            warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle.*")
            warnings.filterwarnings("ignore", message=".*won't be using warmup.*")
            sched = schedule(wait=0, warmup=steps_warmup, active=1, repeat=1)
            with profile(activities=activities, schedule=sched, on_trace_ready=ready) as prof:
                for step in range(steps_warmup + 1):
                    (fn if step == steps_warmup or warmup_fn is None else warmup_fn)()
                    if cuda:
                        torch.cuda.synchronize(device)
                    prof.step()
        if not exported:
            raise ProfileError("torch.profiler produced no trace for the active step")
        return load_trace(out)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def profile_forward(forward: Callable[[], None], attention_patterns: tuple[str, ...] | list[str],
                    device: str | torch.device, trace_path: Path | None = None,
                    steps_warmup: int = 1, warmup_fn: Callable[[], None] | None = None) -> KernelCounts:
    """Counts of ONE forward, from the active step of a torch.profiler run (see module doc).

    Args:
        forward: zero-argument forward; wrap it with
            :func:`~cpbench.profiles.ranges.annotated_forward` so calls and layers are labelled
            (required on CPU, where calls are all that is counted).
        attention_patterns: ``ForwardLike.kernel_patterns`` (lower-case substrings); empty for the
            torch reference.
        device: where the forward runs (``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...).
        trace_path: where to write the Chrome trace (made to end in ``.json.gz``), or None.
        steps_warmup: profiled warm-up steps before the counted one (>= 0; 1 recommended).
        warmup_fn: what a warm-up step runs (default: ``forward``); see :func:`trace_events`.
    Returns:
        KernelCounts of one forward (on CPU only ``attention_calls`` is non-zero).
    Raises:
        ProfileError: CUDA and no GPU activity at all (CUPTI not recording); CUDA with patterns and
            no attention kernel; no patterns (or CPU) and no attention call range.
    """
    events = trace_events(forward, device, steps_warmup, trace_path, warmup_fn)
    counts = count_events(events, attention_patterns)
    if _is_cuda(device):
        if counts.kernels == 0:
            raise ProfileError("torch.profiler recorded no GPU kernels on "
                               f"{device}: CUPTI is not recording (another profiler attached?)")
        if attention_patterns:
            return counts.require_attention("the profiled forward")
    if counts.attention_calls == 0:
        raise ProfileError("no prev/next/combined ranges in the profiled forward: wrap it with "
                           "cpbench.profiles.annotated_forward before profiling")
    return counts


def profile_prepared(prepared: ForwardLike, cell_label: str, device: str | torch.device,
                     trace_path: Path | None = None, payload: dict | None = None,
                     steps_warmup: int = 1, nvtx_on: bool = False,
                     warmup_fn: Callable[[], None] | None = None) -> KernelCounts:
    """:func:`profile_forward` of ``prepared`` with its own ``kernel_patterns``, wrapped in
    :func:`~cpbench.profiles.ranges.annotated_forward` (record_function labels on; NVTX optional)."""
    fwd = annotated_forward(prepared, cell_label, payload, nvtx_on=nvtx_on)
    return profile_forward(fwd, prepared.kernel_patterns, device, trace_path, steps_warmup, warmup_fn)


def measure_call(call: Callable[[], None], attention_patterns: tuple[str, ...] | list[str],
                 device: str | torch.device, name: str = "combined") -> KernelCounts:
    """Counts of ONE attention call (one closure of ``prepared.layers[i]``), profiled like a forward.

    The call runs inside a record_function named ``name``, so ``attention_calls`` is 1.
    """
    def one() -> None:
        with record_function(name):
            call()

    return count_events(trace_events(one, device), attention_patterns)


def kernels_per_call(call: Callable[[], None], attention_patterns: tuple[str, ...] | list[str],
                     device: str | torch.device) -> int:
    """Attention kernels one call executes (1 for flashinfer-fa2/-fa3 without split-KV; merge kernels are not
    attention). Needs CUDA and non-empty patterns.

    Raises:
        ProfileError: not CUDA, no patterns, or zero attention kernels in the call.
    """
    if not _is_cuda(device) or not attention_patterns:
        raise ProfileError("kernels per call needs a CUDA device and the backend's kernel_patterns")
    return measure_call(call, attention_patterns, device).require_attention("one call").attention


def expected_for(prepared: ForwardLike, kernels_per_call: int = 1) -> int:
    """Attention kernels ``prepared`` should execute per forward (layers x calls x kernels/call)."""
    return expected_attention_kernels(len(prepared.layers), prepared.calls_per_layer, kernels_per_call)
