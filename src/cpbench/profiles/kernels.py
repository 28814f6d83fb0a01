"""Kernel classification by name and counting over Chrome-trace events (torch.profiler export).

Classes (checked in this order, on the lower-cased name):

- ``merge``: an attention call's helper kernels beside its attention kernel: split-KV merges (FlashInfer's
  ``MergeStates``, ``MergeState``, ``VariableLengthMergeStates``; FlashAttention-3's ``flash::FlashAttnFwdCombine``)
  and FlashAttention-3's per-call scheduler (``flash::prepare_varlen_num_blocks_kernel``); checked first so a
  broad attention pattern such as ``"flashinfer"`` cannot swallow them. Attention work of the call, counted apart
  so that attention kernels still count calls (36 vs 72 per rank).
- ``comm``: collective-communication kernels (NCCL's ``ncclDevKernel_AllGather_RING_LL(...)``,
  ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``; RCCL keeps the names); checked before attention
  so a forward with an all-gather per layer reports attention and collectives apart. gloo runs
  collectives on the CPU and launches no kernel.
- ``attention``: the name contains one of the backend's ``attention_patterns`` (lower-case
  substrings, ``ForwardLike.kernel_patterns``); a pattern that names a namespace (``ns::...``) matches that
  namespace whole, not the tail of a longer one, so ``flash::flash_fwd_kernel`` (Dao's FlashAttention-2) does not
  match PyTorch's copy ``pytorch_flash::flash_fwd_kernel``; e.g. fa2 ``flashinfer::BatchPrefillWithPagedKVCacheKernel
  <...>``, fa3 ``flashinfer::PrefillWithKVCacheKernel<...SparseCollectiveMainloop<PagedParams...>>``,
  trtllm-gen ``fmha...`` kernels. The patterns live in the backend registry
  (``cpbench.kernels.backends.registry``); callers pass them in, this package never imports it. The attention
  kernels of libraries cpbench does not run (:data:`ENGINE_ATTENTION`) are named here, for reading an engine's
  traces.
- ``fill``: zero/constant fills (``FillFunctor``, ``fill_kernel``) and GPU memsets.
- ``copy``: GPU memcpys and elementwise copy kernels (``copy_kernel``, ``CatArrayBatchedCopy``).
- ``other``: everything else (the torch reference's matmuls, softmax pieces, ...).
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field

# FlashInfer's MergeStatesKernel, MergeStateInPlaceKernel, VariableLengthMergeStates; FlashAttention-3's combine
# (flash::FlashAttnFwdCombine<...>) and varlen scheduler (flash::prepare_varlen_num_blocks_kernel); FlashAttention-2's
# split-KV combine (flash::flash_fwd_splitkv_combine_kernel, also in PyTorch's pytorch_flash::) and ck_tile's
# (FmhaFwdSplitKVCombineKernel)
MERGE_PATTERNS = ("mergestate", "flash::flashattnfwdcombine", "flash::prepare_varlen_num_blocks",
                  "flash_fwd_splitkv_combine", "fmhafwdsplitkvcombine")
FILL_PATTERNS = ("fillfunctor", "fill_kernel", "memset")
COPY_PATTERNS = ("memcpy", "copy_kernel", "catarraybatchedcopy")
COMM_PATTERNS = ("nccl",)  # ncclDevKernel_* (NCCL >= 2.19), ncclKernel_* (older NCCL)

# Attention kernels of libraries an engine may run that are not cpbench backends: label -> lower-case name patterns
# (matched as the backends' are). Their forwards are counted like any backend's; a cell
# of cpbench cannot be set beside them. fa3's FlashAttnFwdSm90 is Dao's FlashAttention-3, a cpbench backend.
ENGINE_ATTENTION: dict[str, tuple[str, ...]] = {
    # Dao-AILab flash-attention 2 (flash_attn, vllm_flash_attn): void flash::flash_fwd_kernel<Flash_fwd_kernel_traits..>
    "flash-attn-2 (Dao)": ("flash::flash_fwd_kernel", "flash::flash_fwd_splitkv_kernel"),
    # torch.nn.functional.scaled_dot_product_attention's flash backend, FlashAttention-2 under namespace pytorch_flash
    "sdpa-flash (PyTorch)": ("pytorch_flash::flash_fwd_kernel", "pytorch_flash::flash_fwd_splitkv_kernel"),
    # SDPA's memory-efficient backend: fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::...)
    "sdpa-mem-efficient (PyTorch)": ("fmha_cutlassf",),
    # cuDNN's SDPA graphs: cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_...
    "cudnn-sdpa": ("cudnn_generated_fort_native_sdpa",),
    # AMD ck_tile (aiter, SGLang/vLLM on ROCm), often mangled: _ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefill...
    "ck_tile-fmha (AMD)": ("fmhabatchprefillwithpagedkvcachekernel", "fmhafwdkernel", "fmhafwdsplitkvkernel"),
    # vLLM's Triton attention (triton_unified_attention.py): kernel_unified_attention_2d / _3d
    "triton-unified-attention (vLLM)": ("kernel_unified_attention_2d", "kernel_unified_attention_3d"),
}

# A trace without GPU kernels (cpbench's own profile on a CPU) is counted by its attention calls: each
# prev/next/combined record_function range becomes a pseudo-kernel named CALL_KERNEL + the range's name
CALL_KERNEL = "cpbench attention call: "
CALL_ATTENTION = {"attention calls (cpbench's record_function ranges)": (CALL_KERNEL.lower(),)}

KINDS = ("attention", "merge", "comm", "fill", "copy", "other")

# CPU-side API calls that launch GPU work, as they appear in torch.profiler (cat cuda_runtime /
# cuda_driver) and nsys (sometimes with a ``_v7000`` / ``_ptsz`` suffix, stripped before matching).
LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch",
})
_API_SUFFIX = re.compile(r"(_v\d+|_ptsz|_ptds)+$")

KERNEL_CATS = ("kernel",)
MEMSET_CATS = ("gpu_memset",)
MEMCPY_CATS = ("gpu_memcpy",)
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
ANNOTATION_CAT = "user_annotation"  # CPU record_function ranges ("gpu_user_annotation" is their GPU copy)
CALL_NAMES = ("prev", "next", "combined")
_LAYER_RANGE = re.compile(r"layer(\d{1,9})")  # profiles.ranges.annotated_forward's per-layer range names


class ProfileError(RuntimeError):
    """A profile that cannot be trusted: no attention kernels (or calls) seen, nsys could not make a
    report, ... The message says what was seen and what to check, in one line."""


def classify(name: str, attention_patterns: tuple[str, ...] | list[str] = ()) -> str:
    """Class of one GPU activity by its (demangled) name.

    Args:
        name: kernel name as torch.profiler or nsys print it, or ``"Memset (Device)"`` /
            ``"Memcpy HtoD (Pageable -> Device)"`` style memory-activity names.
        attention_patterns: lower-case substrings identifying the backend's attention kernels; empty
            means no kernel counts as attention (the torch reference counts attention *calls*).
    Returns:
        one of :data:`KINDS`.
    """
    low = (name or "").lower()
    if any(p in low for p in MERGE_PATTERNS):
        return "merge"
    if any(p in low for p in COMM_PATTERNS):
        return "comm"
    found = _attention_re(tuple(attention_patterns))
    if found is not None and found.search(low):
        return "attention"
    if any(p in low for p in FILL_PATTERNS):
        return "fill"
    if any(p in low for p in COPY_PATTERNS):
        return "copy"
    return "other"


@functools.lru_cache(maxsize=64)
def _attention_re(patterns: tuple[str, ...]) -> re.Pattern | None:
    """One regular expression for ``patterns``: each lower-cased and literal; one with a namespace (``::``) only where
    a name starts (not right after a letter, digit or ``_``: ``flash::`` is not the end of ``pytorch_flash::``)."""
    pats = sorted({p.lower() for p in patterns if p})
    return re.compile("|".join((r"(?<![a-z0-9_])" if "::" in p else "") + re.escape(p) for p in pats)) if pats else None


def is_launch_api(name: str) -> bool:
    """True for a CPU-side call that launches a kernel or a graph (``cudaLaunchKernel``, ...)."""
    return _API_SUFFIX.sub("", name or "") in LAUNCH_APIS


@dataclass
class KernelCounts:
    """Kernel and launch counts of one profiled forward (or one nsys range).

    Attributes:
        attention, merge, comm, fill, copy, other: GPU executions per class (see :func:`classify`);
            memsets count as ``fill``, memcpys as ``copy``.
        launches: CPU-side launch API calls (:data:`LAUNCH_APIS`); a CUDA-graph replay is one.
        attention_calls: ``prev`` / ``next`` / ``combined`` record_function ranges seen (CPU side).
        kernel_names: GPU activity name -> executions.
        gpu_busy_us: time the GPU was executing any of them (the union of their intervals), µs; 0 when
            the trace carries no GPU activity (CPU) or no timestamps.
        layer_us: per ``layer{i}`` range, ``i -> µs``: with GPU activity, the GPU busy time (union of
            intervals) of the activities launched inside the range (matched by the launch call's
            correlation id and host timestamp; empty when none can be matched); without (CPU), the
            range's own host duration (which includes the profiler's cost).
    """

    attention: int = 0
    merge: int = 0
    comm: int = 0
    fill: int = 0
    copy: int = 0
    other: int = 0
    launches: int = 0
    attention_calls: int = 0
    kernel_names: dict[str, int] = field(default_factory=dict)
    gpu_busy_us: float = 0.0
    layer_us: dict[int, float] = field(default_factory=dict)

    @property
    def kernels(self) -> int:
        """All GPU executions (every class)."""
        return self.attention + self.merge + self.comm + self.fill + self.copy + self.other

    def add(self, name: str, kind: str, n: int = 1) -> None:
        """Count ``n`` executions of activity ``name`` of class ``kind``."""
        setattr(self, kind, getattr(self, kind) + n)
        self.kernel_names[name] = self.kernel_names.get(name, 0) + n

    def require_attention(self, what: str = "") -> "KernelCounts":
        """Return self, or raise ProfileError when no attention kernel was seen."""
        if self.attention == 0:
            seen = ", ".join(f"{k} x{v}" for k, v in sorted(self.kernel_names.items(),
                                                               key=lambda kv: -kv[1])[:3])
            raise ProfileError(
                f"no attention kernels seen{' in ' + what if what else ''} "
                f"({self.kernels} GPU activities{': ' + seen if seen else ''}); check the backend's "
                "kernel_patterns and that the profiler records CUDA kernels (CUPTI)")
        return self

    def to_row(self) -> dict[str, int]:
        """Flat numbers for a results row (kernel_names left out)."""
        return {"attention_kernels": self.attention, "merge_kernels": self.merge, "comm_kernels": self.comm,
                "fill_kernels": self.fill, "copy_kernels": self.copy, "other_kernels": self.other,
                "kernels": self.kernels, "launches": self.launches,
                "attention_calls": self.attention_calls}


def count_events(events: list[dict], attention_patterns: tuple[str, ...] | list[str] = (), *,
                 require_attention: bool = False) -> KernelCounts:
    """Count a Chrome trace's events (``trace["traceEvents"]`` of a torch.profiler export).

    Counted: complete events (``ph`` "X" or missing) with ``cat`` ``kernel`` / ``gpu_memset`` /
    ``gpu_memcpy`` (GPU executions, classified by name), ``cuda_runtime`` / ``cuda_driver`` launch
    calls, and ``user_annotation`` ranges named ``prev``/``next``/``combined``. ``ts``/``dur`` (µs) of
    GPU activities give ``gpu_busy_us``, and with the ``layer{i}`` ranges and the launch calls'
    ``args.correlation`` the per-layer ``layer_us``; they are otherwise not needed (0 or missing is
    fine); events without ``name`` or ``cat`` are skipped; ``cat`` matching is case-insensitive (older
    torch wrote ``Kernel``).

    Raises:
        ProfileError: ``require_attention`` and no attention kernel was seen.
    """
    out = KernelCounts()
    spans = []
    gpu: list[tuple[object, float, float]] = []  # (correlation id, start, end) of each GPU activity
    launched_at: dict = {}  # correlation id -> host timestamp of the launch call
    layers: list[tuple[float, float, int]] = []  # (start, end, layer index) of each layer{i} range
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph", "X") != "X":
            continue
        cat = str(ev.get("cat") or "").lower()
        name = ev.get("name")
        if not cat or not isinstance(name, str):
            continue
        if cat in KERNEL_CATS or cat in MEMSET_CATS or cat in MEMCPY_CATS:
            ts, dur = ev.get("ts"), ev.get("dur")
            if isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and dur > 0:
                spans.append((float(ts), float(ts) + float(dur)))
                gpu.append((_correlation(ev), float(ts), float(ts) + float(dur)))
        if cat in KERNEL_CATS:
            out.add(name, classify(name, attention_patterns))
        elif cat in MEMSET_CATS:
            out.add(name, "fill")
        elif cat in MEMCPY_CATS:
            out.add(name, "copy")
        elif cat in LAUNCH_CATS:
            out.launches += is_launch_api(name)
            if isinstance(ev.get("ts"), (int, float)) and _correlation(ev) is not None:
                launched_at[_correlation(ev)] = float(ev["ts"])
        elif cat == ANNOTATION_CAT and name in CALL_NAMES:
            out.attention_calls += 1
        elif cat == ANNOTATION_CAT and _LAYER_RANGE.fullmatch(name):
            ts, dur = ev.get("ts"), ev.get("dur")
            if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
                layers.append((float(ts), float(ts) + float(dur), int(name[5:])))
    out.gpu_busy_us = union_length(spans)
    out.layer_us = _layer_times(layers, gpu, launched_at)
    if require_attention:
        out.require_attention("the trace")
    return out


def _correlation(ev: dict):
    """The CUPTI correlation id linking a launch call to its GPU activity (``args.correlation``, an int),
    or None (missing, or not an int: a hand-made trace)."""
    args = ev.get("args")
    corr = args.get("correlation") if isinstance(args, dict) else None
    return corr if isinstance(corr, int) and not isinstance(corr, bool) else None


def _layer_times(layers: list[tuple[float, float, int]], gpu: list[tuple[object, float, float]],
                 launched_at: dict) -> dict[int, float]:
    """``layer index -> µs`` (see ``KernelCounts.layer_us``): each GPU activity goes to the layer range
    whose host interval holds its launch call; without GPU activity, the ranges' host durations. Empty
    when GPU activity exists but none of it can be tied to a layer (no launch calls or correlation ids):
    unknown, not 0."""
    if not layers:
        return {}
    if not gpu:
        return {i: sum(b - a for a, b, j in layers if j == i) for i in sorted({j for _, _, j in layers})}
    layers = sorted(layers)
    starts = [a for a, _, _ in layers]
    spans: dict[int, list[tuple[float, float]]] = {i: [] for _, _, i in layers}
    for corr, a, b in gpu:
        t = launched_at.get(corr)
        k = bisect.bisect_right(starts, t) - 1 if t is not None else -1
        if k >= 0 and t <= layers[k][1]:
            spans[layers[k][2]].append((a, b))
    if not any(spans.values()):
        return {}
    return {i: union_length(s) for i, s in sorted(spans.items())}


def union_length(spans: list[tuple[float, float]]) -> float:
    """Total length covered by ``[start, end)`` intervals (overlaps counted once), in their unit."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def expected_attention_kernels(num_layers: int, calls_per_layer: int, kernels_per_call: int) -> int:
    """Attention kernels one forward should execute: ``num_layers * calls_per_layer * kernels_per_call``.

    E.g. GPT-OSS-120B (36 layers), one kernel per call: two-call 36*2*1 = 72, fused 36*1*1 = 36.
    """
    if min(num_layers, calls_per_layer, kernels_per_call) < 0:
        raise ValueError("counts must be >= 0")
    return num_layers * calls_per_layer * kernels_per_call
