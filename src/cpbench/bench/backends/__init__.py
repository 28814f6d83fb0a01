"""Backend registry: name -> backend object, and `auto` resolution (docs/design.md §3).

auto: compute capability 10.x -> trtllm-gen, 9.0 -> fa3, other CUDA -> fa2, no CUDA -> torch.
"""

from __future__ import annotations

import torch

from cpbench.bench.backends.base import Backend, Prepared
from cpbench.bench.backends.torch_ref import TorchBackend
from cpbench.errors import CpbenchInputError

BACKEND_NAMES = ("auto", "torch", "fa2", "fa3", "trtllm-gen")


def get_backend(name: str) -> Backend:
    """The backend object for ``name`` (not ``auto``). Raises CpbenchInputError for an unknown name."""
    if name == "torch":
        return TorchBackend()
    if name in ("fa2", "fa3"):
        from cpbench.bench.backends.flashinfer_fa import FlashInferBackend

        return FlashInferBackend(name)
    if name == "trtllm-gen":
        from cpbench.bench.backends.trtllm_gen import TrtllmGenBackend

        return TrtllmGenBackend()
    raise CpbenchInputError(f"unknown backend {name!r}: use one of {', '.join(BACKEND_NAMES)}")


def resolve_auto(device: torch.device) -> str:
    """The backend `auto` picks on ``device``."""
    if device.type != "cuda":
        return "torch"
    major, minor = torch.cuda.get_device_capability(device)
    if major == 10:
        return "trtllm-gen"
    if (major, minor) == (9, 0):
        return "fa3"
    return "fa2"


__all__ = ["Backend", "Prepared", "BACKEND_NAMES", "get_backend", "resolve_auto"]
