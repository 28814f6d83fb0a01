"""NVTX ranges and matching ``torch.profiler`` labels around one rank's forward.

Nesting (the same names in Nsight Systems and in a Perfetto view of a torch.profiler trace)::

    <cell_label>            e.g. "cp4 bs1 extend8192 r0 fused eager"   (the whole forward)
      layer{i}              one per layer, i = 0..num_layers-1
        prev | next         two-call mode: one range per attention call
        combined            fused mode (and cp_size 1)

NVTX ranges go to domain ``"cpbench"`` through the ``nvtx`` package (so ``ncu --nvtx --nvtx-include
"cpbench@layer0/"`` and ``nsys stats -r nvtx_kern_sum`` see them); when ``nvtx`` is missing, or no
tool is attached (the package then hands out a no-op domain), the NVTX side costs nearly nothing.
The torch side uses ``torch.profiler.record_function``, entered only while a torch profiler runs
(the check costs ~0.04 µs; an idle record_function would cost ~6 µs per range).

Ranges cost host time (see :func:`range_overhead_us`): keep them out of timed sweeps unless the user
asks for ``--nvtx``; use ``prepared.forward`` there instead.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from cpbench.profiles.forward import ForwardLike

try:  # nvtx is a declared dependency, but a broken install must not break profiling
    import nvtx as _nvtx
except Exception:  # pragma: no cover - depends on the environment
    _nvtx = None

DOMAIN = "cpbench"
_COLORS = {"cell": "green", "layer": "blue", "call": "orange"}


def _domain():
    """The ``cpbench`` NVTX domain, or None without the nvtx package (a no-op domain without a tool)."""
    if _nvtx is None:
        return None
    try:
        return _nvtx.get_domain(DOMAIN)
    except Exception:  # pragma: no cover
        return None


def nvtx_payload(payload: dict | None):
    """Numbers of ``payload`` as an NVTX payload value, or None.

    One number → a plain int64/double payload (every nvtx version and nsys show it). Several →
    a NumPy structured scalar with one int64/float64 field per key (NVTX extended payload; shown by
    recent Nsight Systems, ignored by older ones). Non-numeric values are dropped (they are in the
    range name anyway). Returns None when nothing numeric is left or NumPy is missing.
    """
    if not payload:
        return None
    nums = {k: v for k, v in payload.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not nums:
        return None
    if len(nums) == 1:
        return next(iter(nums.values()))
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return None
    dtype = np.dtype([(str(k), "<i8" if isinstance(v, int) else "<f8") for k, v in nums.items()])
    return np.array(tuple(nums.values()), dtype=dtype)


class Range:
    """A reusable nested range: NVTX push/pop in domain ``cpbench`` plus a torch record_function.

    Args:
        name: the label shown in both tools.
        domain: an nvtx Domain (or no-op domain), or None for no NVTX.
        record: also emit ``torch.profiler.record_function(name)``.
        color: NVTX color name; payload: see :func:`nvtx_payload`.
    The NVTX event attributes are built once here, so entering costs one push and one pop.
    """

    __slots__ = ("name", "_dom", "_attr", "_record", "_rf")

    def __init__(self, name: str, domain=None, record: bool = True, color: str | None = None,
                 payload: dict | None = None) -> None:
        self.name = name
        self._dom = domain
        self._attr = None
        self._record = record
        self._rf = None
        if domain is not None:
            try:
                self._attr = domain.get_event_attributes(name, color, None, nvtx_payload(payload))
            except Exception:  # an nvtx version that rejects the payload: keep the range, drop the numbers
                self._attr = domain.get_event_attributes(name, color, None, None)

    def __enter__(self) -> "Range":
        if self._dom is not None:
            self._dom.push_range(self._attr)
        if self._record and torch.autograd._profiler_enabled():  # ~0.04 µs; record_function ~6 µs
            self._rf = torch.profiler.record_function(self.name)
            self._rf.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._rf is not None:
            self._rf.__exit__(*exc)
            self._rf = None
        if self._dom is not None:
            self._dom.pop_range()


def annotated_forward(prepared: ForwardLike, cell_label: str, payload: dict | None = None,
                      nvtx_on: bool = True, record_functions: bool = True) -> Callable[[], None]:
    """A forward that launches exactly what ``prepared.forward()`` launches, inside named ranges.

    Args:
        prepared: one rank's forward (``prepared.layers[i] = [(call_name, closure), ...]``).
        cell_label: name of the whole-forward range, chosen by the caller, e.g.
            ``"cp4 bs1 extend8192 r0 fused eager"``.
        payload: numbers of the cell (e.g. ``CellKey.as_json(rank=0)``; numbers only are kept), attached
            to the whole-forward NVTX range where the nvtx package allows (see :func:`nvtx_payload`).
        nvtx_on: emit NVTX ranges (domain ``"cpbench"``).
        record_functions: emit ``torch.profiler.record_function`` labels (needed by
            :func:`cpbench.profiles.capture.profile_forward` to count attention calls).
    Returns:
        zero-argument callable; no host sync, no allocation beyond the ranges themselves.
    """
    dom = _domain() if nvtx_on else None
    top = Range(cell_label, dom, record_functions, _COLORS["cell"], payload)
    layers = [(Range(f"layer{i}", dom, record_functions, _COLORS["layer"]),
               [(Range(step[0], dom, record_functions, _COLORS["call"]), step[1]) for step in calls])
              for i, calls in enumerate(prepared.layers)]

    def forward() -> None:
        with top:
            for layer_range, calls in layers:
                with layer_range:
                    for call_range, fn in calls:
                        with call_range:
                            fn()

    return forward


def range_overhead_us(n: int = 1000, nvtx_on: bool = True, record_functions: bool = True) -> float:
    """Host µs of one nested range enter + exit (median of 5 batches of ``n``), no torch profiler
    running (so the record_function side is only its enabled-check; under torch.profiler add its
    own cost, several µs).

    This is the cost each ``layer{i}`` or call range adds to a forward: a 36-layer two-call forward
    has 1 + 36 + 72 = 109 ranges. Under nsys the NVTX part costs more than measured here (a tool is
    attached then); the number is a lower bound for that case.
    """
    dom = _domain() if nvtx_on else None
    outer = Range("cpbench-overhead-outer", dom, record_functions)
    inner = Range("cpbench-overhead-inner", dom, record_functions)
    with outer:
        for _ in range(min(n, 50)):  # warm caches and lazy registration
            with inner:
                pass
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                with inner:
                    pass
            samples.append((time.perf_counter() - t0) * 1e6 / n)
    samples.sort()
    return samples[len(samples) // 2]


def nvtx_range(name: str, payload: dict | None = None) -> Range:
    """A reusable NVTX push/pop range ``name`` in domain ``cpbench`` (no torch record_function), e.g.
    around a CUDA-graph replay, whose kernels ``ncu --nvtx-include "cpbench@<name>/"`` then selects."""
    return Range(name, _domain(), record=False, color=_COLORS["cell"], payload=payload)
