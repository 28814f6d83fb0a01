"""Attention backends: the registry (:mod:`cpbench.kernels.backends.registry`, no torch), the declaration a
backend or plugin makes (:mod:`cpbench.kernels.backends.spec`, no torch) and the backend contract
(:mod:`cpbench.kernels.backends.base`, loaded lazily: it imports torch). Every name here is read on first use, so
importing a backend module reads no plugin declaration and imports no torch by itself.

``auto``: the TRT-LLM kernel family SGLang PR #33137 fuses where one runs (10.x -> trtllm-gen, 9.x/12.x ->
trtllm-fmha-v2), other >= 8.0 -> flashinfer-fa2, no CUDA -> torch.
"""

from __future__ import annotations

_LAZY = {"Backend": "base", "Prepared": "base", "BackendSpec": "spec",
         **dict.fromkeys(("BACKEND_NAMES", "BACKENDS", "get_backend", "get_spec", "kernel_patterns",
                          "known_attention_patterns", "resolve_auto"), "registry")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"cpbench.kernels.backends.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'cpbench.kernels.backends' has no attribute {name!r}")


__all__ = sorted(_LAZY)
