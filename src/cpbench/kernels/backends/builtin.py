"""cpbench's own backends, declared as a plugin declares its own (docs/backends.md): the registry reads
:data:`SPECS` through the same loader as the ``cpbench.backends`` entry points, first, so a plugin cannot take
one of these names.

No torch and no backend implementation is imported here.
"""

from __future__ import annotations

from cpbench.domain.modes import ALL_MODES
from cpbench.kernels.backends.spec import BackendSpec

THREE_MODES = tuple(m.value for m in ALL_MODES)  # plain strings, as BackendSpec.modes holds them

# From the most portable to the most specialised: `auto` picks the last one that runs on the device (of those it
# may pick; the flex analysis backend comes last and never is).
SPECS: tuple[BackendSpec, ...] = (
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
        cuda_exact=((9, 0),), modes=THREE_MODES,
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
        cpu=True, cuda_min=(8, 0), auto=False, modes=THREE_MODES,
        description="PyTorch FlexAttention in three modes (two-call, fused, cp-native): the call structure on "
                    "one kernel family; compiled on CUDA, eager on CPU"),
)
