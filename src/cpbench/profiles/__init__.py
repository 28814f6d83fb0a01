"""Profiling: NVTX / record_function ranges, kernel classification and counting, torch.profiler
capture (Perfetto traces), and the Nsight Systems cross-check.

Patterns that name a backend's attention kernels come from the caller (the backend registry in
``cpbench.kernels.backends``): this package imports nothing from the measuring layers (import-linter).

Modules: ``forward`` (ForwardLike, the Protocol a prepared forward satisfies; no torch), ``ranges``
(annotated forward, range overhead), ``kernels`` (classify, KernelCounts, count_events,
ProfileError; no torch), ``capture`` (profile_forward and friends), ``nsys`` (argv builders and
nvtx_kern_sum parsing; no torch). Names from ``ranges`` and ``capture`` load lazily, so
importing this package for ``kernels``/``nsys`` does not import torch.
"""

from cpbench.profiles.forward import ForwardLike
from cpbench.profiles.kernels import (KERNEL_CATS, KINDS, KernelCounts, ProfileError, classify, count_events,
                                      expected_attention_kernels)

_LAZY = {
    "annotated_forward": "ranges", "range_overhead_us": "ranges", "Range": "ranges",
    "profile_forward": "capture", "profile_prepared": "capture", "measure_call": "capture",
    "kernels_per_call": "capture", "expected_for": "capture", "load_trace": "capture",
    "gz_trace_path": "capture", "trace_events": "capture",
    "find_nsys": "nsys", "nsys_profile_argv": "nsys", "stats_argv": "nsys", "report_path": "nsys",
    "parse_nvtx_kern_sum": "nsys", "kernels_per_range": "nsys", "cuda_profiler_range": "nsys",
    "find_qdstrm_importer": "nsys", "import_qdstrm_argv": "nsys",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"cpbench.profiles.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'cpbench.profiles' has no attribute {name!r}")


__all__ = ["ForwardLike", "KERNEL_CATS", "KINDS", "KernelCounts", "ProfileError",
           "classify", "count_events", "expected_attention_kernels", *_LAZY]
