"""The backend registry: one list that the CLI, doctor, `auto` and the kernel patterns derive from."""

import json
import subprocess
import sys

import pytest

from cpbench.kernels.backends import registry
from cpbench.kernels.backends.registry import (BACKEND_NAMES, capability_refusal, get_backend, kernel_patterns,
                                               known_attention_patterns, resolve_auto)
from cpbench.cli.options import BackendName
from cpbench.errors import CpbenchInputError
from cpbench.profiles.kernels import classify

# Demangled names as torch.profiler / nsys print them (FlashInfer's fa2 and fa3 templates, the flashinfer-fa2 and
# flashinfer-fa3 backends; FA3: recorded on the H200, tests/fixtures/h200_fa3_*).
FA2 = ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, "
       "128u, 1u, 4u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, "
       "__nv_bfloat16, float, int, flashinfer::DefaultAttention<false, true, false, false> >, "
       "flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(...)")
FA3 = ("void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<PagedParams::AdditionalParams, "
       "flashinfer::AttentionKernelTraits<false, 64, 64, 192, 96, 2, cutlass::bfloat16_t, cutlass::bfloat16_t, "
       "cutlass::bfloat16_t, int, AttentionSink>, true, false>, flashinfer::CollectiveEpilogue<...>, ...>(...)")
# FlashAttention-3's attention kernel (the fa3 backend)
FLASH_FA3 = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
             "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, ...>, flash::VarlenDynamicPersistentTileScheduler"
             "<128, 176, 128, 4, true, false, true, true> > > >(...)")
TRTLLM = "fmhaSm100Kernel_QkvBfloat16OBfloat16H64PagedKvCausalP64VarSeqQ128Kv128PersistentContext"
# FMHAv2 on Hopper, as torch.profiler named them on the H200 (window and full layers of gpt-oss-120b)
FMHA_V2 = "fmha_v2_flash_attention_bf16_64_256_S_q_paged_kv_64_causal_output_bf16_tma_ws_sm90_kernel"
FMHA_V2_SWA = "fmha_v2_flash_attention_bf16_64_256_S_q_paged_kv_64_sliding_or_chunked_causal_output_bf16_tma_ws_sm90_kernel"
NCCL = ["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"]


def test_names_are_the_cli_choices_minus_auto():
    assert BACKEND_NAMES == ("torch", "flashinfer-fa2", "flashinfer-fa3", "fa3", "trtllm-fmha-v2", "trtllm-gen", "flex")
    assert [m.value for m in BackendName] == ["auto", *BACKEND_NAMES]
    assert BackendName.trtllm_gen.value == "trtllm-gen" and isinstance(BackendName.auto, str)
    assert BackendName.flashinfer_fa3.value == "flashinfer-fa3" and BackendName.fa3.value == "fa3"


def test_doctor_lists_exactly_the_registry_backends():
    from cpbench.commands.doctor import diagnose

    assert tuple(diagnose()["backends"]) == BACKEND_NAMES


@pytest.mark.parametrize("where,expect", [
    ((10, 0), "trtllm-gen"), ((10, 3), "trtllm-gen"), ((9, 0), "trtllm-fmha-v2"), ((8, 0), "flashinfer-fa2"),
    ((8, 9), "flashinfer-fa2"), ((12, 0), "trtllm-fmha-v2"), ((12, 1), "trtllm-fmha-v2"), ((11, 0), "flashinfer-fa2"),
    ((7, 5), "torch"), (None, "torch"),
    ("cpu", "torch")])
def test_resolve_auto_by_capability(where, expect):
    assert resolve_auto(where) == expect


def test_resolve_auto_by_torch_device(monkeypatch):
    import torch

    assert resolve_auto(torch.device("cpu")) == "torch"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert resolve_auto(torch.device("cuda:0")) == "trtllm-fmha-v2"
    with pytest.raises(CpbenchInputError, match="compute capability"):
        resolve_auto("mps")


@pytest.mark.parametrize("name,cc,ok", [
    ("flashinfer-fa3", (9, 0), True), ("flashinfer-fa3", (10, 0), False), ("flashinfer-fa3", (8, 0), False),
    ("fa3", (9, 0), True), ("fa3", (8, 0), False), ("trtllm-gen", (10, 0), True),
    ("trtllm-gen", (9, 0), False), ("trtllm-gen", (12, 0), False), ("flashinfer-fa2", (8, 0), True),
    ("flashinfer-fa2", (7, 5), False), ("torch", (7, 0), True), ("torch", None, True), ("flashinfer-fa2", None, False),
    ("trtllm-fmha-v2", (9, 0), True),
    ("trtllm-fmha-v2", (12, 0), True), ("trtllm-fmha-v2", (10, 0), False), ("trtllm-fmha-v2", (8, 0), False),
    ("trtllm-fmha-v2", None, False)])
def test_capabilities(name, cc, ok):
    assert registry.BACKENDS[name].runs_on(cc) is ok


def test_capability_refusal_names_where_and_the_alternative():
    assert capability_refusal("flashinfer-fa3", (9, 0)) is None
    assert capability_refusal("flashinfer-fa3", (8, 0)) == \
        "flashinfer-fa3 runs only on compute capability 9.0; this GPU is 8.0: use flashinfer-fa2 (or --backend auto)"
    assert capability_refusal("trtllm-gen", (9, 0)).endswith("10.x; this GPU is 9.0: use trtllm-fmha-v2 (or --backend auto)")
    assert capability_refusal("trtllm-fmha-v2", (10, 0)) == ("trtllm-fmha-v2 runs only on compute capability 9.x/12.x; "
                                                             "this GPU is 10.0: use trtllm-gen (or --backend auto)")


@pytest.mark.parametrize("name,kind", [(FA2, "attention"), (FA3, "attention"), (FLASH_FA3, "attention"), (TRTLLM, "attention"),
                                       (FMHA_V2, "attention"), (FMHA_V2_SWA, "attention"), ("Memset (Device)", "fill"),
                                       *[(n, "comm") for n in NCCL]])
def test_classify_real_names_with_known_patterns(name, kind):
    assert classify(name, known_attention_patterns()) == kind


def test_each_backend_matches_only_its_own_kernel():
    own = {"flashinfer-fa2": FA2, "flashinfer-fa3": FA3, "fa3": FLASH_FA3, "trtllm-fmha-v2": FMHA_V2, "trtllm-gen": TRTLLM}
    for backend, kernel in own.items():
        for other in own:
            assert (classify(kernel, kernel_patterns(other)) == "attention") is (other == backend), (backend, other)
    assert kernel_patterns("torch") == ()
    assert known_attention_patterns() == ("flashinfer::batchprefillwithpagedkvcachekernel",
                                          "flashinfer::prefillwithkvcachekernel",
                                          "flash::flashattnfwdsm90", "fmha_v2_flash_attention", "fmhasm",
                                          "triton_tem_fused")


def test_another_vendors_kernel_is_never_named_after_flashinfers():
    """AMD ck_tile's FmhaBatchPrefillWithPagedKVCacheKernel holds FlashInfer fa2's kernel name as a substring; Dao
    FlashAttention-3's kernel is fa3's."""
    ck = "void ck_tile::kentry<ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<ck_tile::BlockFmhaPipeline>>(x)"
    assert not any(classify(ck, kernel_patterns(b)) == "attention" for b in BACKEND_NAMES)
    fa3 = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::tuple<>, true>>>(p)"
    assert [b for b in BACKEND_NAMES if classify(fa3, kernel_patterns(b)) == "attention"] == ["fa3"]


def test_get_backend_builds_the_named_class():
    assert [get_backend(n).name for n in BACKEND_NAMES] == list(BACKEND_NAMES)
    with pytest.raises(CpbenchInputError, match="unknown backend 'fa4': use one of auto, torch, flashinfer-fa2"):
        get_backend("fa4")


def test_registry_and_cli_choices_import_without_torch():
    # the registry reads every declaration (cpbench's own, installed plugins') when CHOICES is read; what a plugin's
    # declaration imports (kernels.backends.spec) imports no torch either
    code = ("import sys; import cpbench.kernels.backends.registry as r; import cpbench.kernels.backends; "
            "import cpbench.kernels.backends.spec; "
            "import json; print(json.dumps(['torch' in sys.modules, r.resolve_auto((9, 0)), list(r.CHOICES)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == [False, "trtllm-fmha-v2",
                                      ["auto", "torch", "flashinfer-fa2", "flashinfer-fa3", "fa3", "trtllm-fmha-v2",
                                       "trtllm-gen", "flex"]]
