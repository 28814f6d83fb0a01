"""The one list of attention backends: name -> :class:`BackendSpec`, and what derives from it.

Derived here: :func:`get_backend` (imports the implementing class lazily), :func:`resolve_auto`
(``--backend auto``), :func:`kernel_patterns` / :func:`known_attention_patterns` (attention-kernel
name substrings, for ``Prepared.kernel_patterns`` and the nsys cross-check). The CLI's
``BackendName`` choices and ``cpbench doctor``'s backend list are :data:`BACKEND_NAMES`.

This module imports neither torch nor any backend implementation, so the CLI can build its choices
and tests can resolve ``auto`` without a GPU. A torch device given to :func:`resolve_auto` is read
through ``sys.modules["torch"]`` (it exists once a device does).

Adding a backend: one :class:`BackendSpec` in :data:`BACKENDS` (ordered from the most portable to
the most specialised; ``auto`` prefers the latter) and a class with ``name``, ``supports(device, model, dtype)`` and ``prepare(work, mode)``.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from cpbench.errors import CpbenchInputError

Capability = tuple[int, int]  # CUDA compute capability (major, minor), e.g. (9, 0) for H100/H200


@dataclass(frozen=True)
class BackendSpec:
    """What cpbench knows about a backend without importing it.

    Attributes:
        name: CLI/results name (``--backend``), as in SGLang's ``--attention-backend`` where it exists.
        impl: ``"module:Class"`` implementing it; called as ``Class(*impl_args)``.
        impl_args: positional arguments of the class (``("fa2",)`` for FlashInferBackend).
        kernel_patterns: lower-case substrings of its attention kernels' demangled names; empty when
            attention is many generic kernels (the torch reference counts attention *calls*).
        cpu: runs without CUDA.
        cuda_min: lowest compute capability it runs on, or None (no CUDA support).
        cuda_majors: when set, only these major versions (``(10,)`` = 10.x); checked after ``cuda_min``.
        cuda_exact: when set, only these exact capabilities (``((9, 0),)`` = Hopper sm_90).
        description: one line for ``cpbench doctor`` and ``--help``.
        auto: ``--backend auto`` may pick it (False for an analysis backend such as flex).
    """

    name: str
    impl: str
    kernel_patterns: tuple[str, ...]
    description: str
    impl_args: tuple = ()
    cpu: bool = False
    cuda_min: Capability | None = (8, 0)
    cuda_majors: tuple[int, ...] = ()
    cuda_exact: tuple[Capability, ...] = ()
    auto: bool = True

    def runs_on(self, capability: Capability | None) -> bool:
        """True when this backend can run on compute ``capability`` (None: no CUDA, i.e. CPU)."""
        if capability is None:
            return self.cpu
        cc = tuple(capability)
        if self.cuda_min is None or cc < tuple(self.cuda_min):
            return False
        if self.cuda_majors and cc[0] not in self.cuda_majors:
            return False
        return not self.cuda_exact or cc in self.cuda_exact

    @property
    def capability_text(self) -> str:
        """Where it runs, for messages: ``"9.0"``, ``"10.x"``, ``">= 8.0"``, ``"cpu, cuda any"``."""
        if self.cuda_min is None:
            return "cpu" if self.cpu else "nowhere"
        if tuple(self.cuda_min) == (0, 0) and not (self.cuda_exact or self.cuda_majors):
            cuda = "any"
        elif self.cuda_exact:
            cuda = "/".join(f"{a}.{b}" for a, b in self.cuda_exact)
        elif self.cuda_majors:
            cuda = "/".join(f"{m}.x" for m in self.cuda_majors)
        else:
            cuda = f">= {self.cuda_min[0]}.{self.cuda_min[1]}"
        return f"cpu, cuda {cuda}" if self.cpu else cuda


# From the most portable to the most specialised: `auto` picks the last one that runs on the device (of those it
# may pick; the flex analysis backend comes last and never is).
BACKENDS: dict[str, BackendSpec] = {s.name: s for s in (
    BackendSpec(
        "torch", "cpbench.kernels.backends.torch_ref:TorchBackend",
        kernel_patterns=(), cpu=True, cuda_min=(0, 0),
        description="pure-torch reference (CPU or CUDA): the correctness baseline, not a fast path"),
    BackendSpec(
        "flashinfer-fa2", "cpbench.kernels.backends.flashinfer_fa:FlashInferBackend", impl_args=("fa2",),
        # flashinfer::BatchPrefillWithPagedKVCacheKernel<...>, with its namespace: AMD ck_tile has a
        # FmhaBatchPrefillWithPagedKVCacheKernel of its own (ncu prints names without namespaces: profiles/ncu.py)
        kernel_patterns=("flashinfer::batchprefillwithpagedkvcachekernel",),
        description="FlashInfer paged prefill, backend='fa2' (SGLang --attention-backend flashinfer; compute "
                    "capability >= 8.0)"),
    BackendSpec(
        "flashinfer-fa3", "cpbench.kernels.backends.flashinfer_fa:FlashInferBackend", impl_args=("fa3",),
        kernel_patterns=("flashinfer::prefillwithkvcachekernel",),  # flashinfer::PrefillWithKVCacheKernel<...Paged...>
        cuda_exact=((9, 0),),
        description="FlashInfer paged prefill, backend='fa3' (FlashInfer's own Hopper template; 9.0 only)"),
    BackendSpec(
        "fa3", "cpbench.kernels.backends.flash_attn3:FlashAttn3Backend",
        # cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>: the attention kernel,
        # one per call. Each call also runs flash::prepare_varlen_num_blocks_kernel (its scheduler) and, when it
        # splits KV, flash::FlashAttnFwdCombine: counted as the call's merge work (profiles/kernels.py), not as
        # attention kernels, so 36 vs 72 attention kernels per rank still reads as calls.
        kernel_patterns=("flash::flashattnfwdsm90",),
        cuda_exact=((9, 0),),
        description="FlashAttention-3 flash_attn_with_kvcache (SGLang --attention-backend fa3, its Hopper default: "
                    "sgl_kernel.flash_attn, else upstream flash_attn_interface; 9.0 only), in two-call, fused and "
                    "cp-native (cache_batch_idx) modes"),
    BackendSpec(
        "trtllm-fmha-v2", "cpbench.kernels.backends.trtllm:TrtllmFmhaV2Backend",
        # fmha_v2_flash_attention_bf16_64_256_S_q_paged_kv_64_causal_output_bf16_tma_ws_sm90_kernel (and
        # ..._sliding_or_chunked_causal_...); each call also launches one device memset (not attention)
        kernel_patterns=("fmha_v2_flash_attention",),
        cuda_majors=(9, 12),
        description="FlashInfer trtllm_fmha_v2_prefill, TRT-LLM's FMHAv2 context kernels (Hopper 9.x, 12.x)"),
    BackendSpec(
        "trtllm-gen", "cpbench.kernels.backends.trtllm:TrtllmGenBackend",
        # fmhaSm100Kernel_QkvBfloat16OBfloat16H64PagedKvCausal... ("fmhasm": not FMHAv2's fmha_v2_...)
        kernel_patterns=("fmhasm",),
        cuda_majors=(10,),
        description="FlashInfer trtllm_batch_context_with_kv_cache, SGLang's TRT-LLM MHA path (Blackwell 10.x)"),
    BackendSpec(  # an analysis backend (the call structure on one kernel family): `auto` never picks it
        "flex", "cpbench.kernels.backends.flex:FlexBackend",
        kernel_patterns=("triton_tem_fused",),  # the compiled FlexAttention template (Inductor's triton_tem_*)
        cpu=True, cuda_min=(8, 0), auto=False,
        description="PyTorch FlexAttention in three modes (two-call, fused, cp-native): the call structure on "
                    "one kernel family; compiled on CUDA, eager on CPU"),
)}

BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)  # every concrete backend (no "auto")
AUTO = "auto"
CHOICES: tuple[str, ...] = (AUTO, *BACKEND_NAMES)  # what --backend accepts


def get_spec(name: str) -> BackendSpec:
    """The spec of backend ``name`` (not ``auto``). Raises CpbenchInputError for an unknown name."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise CpbenchInputError(f"unknown backend {name!r}: use one of {', '.join(CHOICES)}") from None


def get_backend(name: str):
    """A new backend object for ``name`` (not ``auto``), its module imported now (torch, and
    flashinfer only when the backend itself imports it). Raises CpbenchInputError for an unknown name."""
    spec = get_spec(name)
    module, cls = spec.impl.split(":")
    return getattr(importlib.import_module(module), cls)(*spec.impl_args)


def kernel_patterns(name: str) -> tuple[str, ...]:
    """Attention-kernel name substrings (lower case) of backend ``name``; ``()`` for ``torch``."""
    return get_spec(name).kernel_patterns


def known_attention_patterns() -> tuple[str, ...]:
    """Every backend's attention-kernel patterns, in registry order, without duplicates."""
    return tuple(dict.fromkeys(p for s in BACKENDS.values() for p in s.kernel_patterns))


def capability_refusal(name: str, capability: Capability) -> str | None:
    """None when backend ``name`` runs on CUDA compute ``capability``, else a one-line reason naming
    where it runs and the backend ``auto`` would pick instead."""
    spec = get_spec(name)
    if spec.runs_on(capability):
        return None
    major, minor = capability
    return (f"{name} runs only on compute capability {spec.capability_text}; this GPU is {major}.{minor}: "
            f"use {resolve_auto(capability)} (or --backend auto)")


def device_capability(device) -> Capability | None:
    """Compute capability of ``device``: a ``(major, minor)`` tuple is returned as is; None, ``"cpu"``
    or a CPU torch.device give None; a CUDA torch.device (or ``"cuda[:N]"``, torch already imported)
    is asked through ``torch.cuda.get_device_capability``. Raises CpbenchInputError for anything else."""
    if device is None:
        return None
    if isinstance(device, tuple):
        return (int(device[0]), int(device[1]))
    kind = device.split(":")[0] if isinstance(device, str) else getattr(device, "type", None)
    if kind == "cpu":
        return None
    torch = sys.modules.get("torch")
    if kind == "cuda" and torch is not None:
        return tuple(torch.cuda.get_device_capability(torch.device(device)))
    raise CpbenchInputError(f"cannot tell the compute capability of device {device!r}: give cpu, cuda[:N] "
                            "or a (major, minor) tuple")


def resolve_auto(device) -> str:
    """The backend ``auto`` picks: the most specialised (last) of :data:`BACKEND_NAMES` that runs on
    ``device`` (see :func:`device_capability` for what it may be): the TRT-LLM kernel family SGLang PR
    #33137 fuses where one runs (10.x -> trtllm-gen, 9.x and 12.x -> trtllm-fmha-v2), other >= 8.0 ->
    flashinfer-fa2, CPU (or CUDA below 8.0) -> torch."""
    cc = device_capability(device)
    return next(n for n, s in reversed(BACKENDS.items()) if s.auto and s.runs_on(cc))


__all__ = ["AUTO", "BACKENDS", "BACKEND_NAMES", "CHOICES", "BackendSpec", "Capability", "capability_refusal",
           "device_capability",
           "get_backend", "get_spec", "kernel_patterns", "known_attention_patterns", "resolve_auto"]
