"""``cpbench profile --from`` on engine traces other projects recorded (tests/fixtures/engine_traces): each is read
as what it is, the attention kernels named after the library that wrote them, never after another vendor's."""

import json

import pytest

import engine_fixtures as ef
from clirun import cpbench
from cpbench.kernels.backends.registry import BACKEND_NAMES, kernel_patterns
from cpbench.studies.engine_traces.forwards import classify_backend
from cpbench.profiles.kernels import ENGINE_ATTENTION

PATTERNS = {**{b: kernel_patterns(b) for b in BACKEND_NAMES if kernel_patterns(b)}, **ENGINE_ATTENTION}


def from_json(*args, code=0):
    r = cpbench("profile", "--from", *args, "--json")
    assert r.returncode == code, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("name,family", [
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
     "(flash::Flash_fwd_params)", "flash-attn-2 (Dao)"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 256, 4>, true>(flash::Flash_fwd_params)",
     "flash-attn-2 (Dao)"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t>>(pytorch_flash::Flash_fwd_params)", "sdpa-flash (PyTorch)"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::tuple<>>>>(T1::Params)",
     "fa3"),
    ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVS",
     "ck_tile-fmha (AMD)"),
    ("void ck_tile::kentry<2, ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<ck_tile::BlockFmhaPipeline>>()",
     "ck_tile-fmha (AMD)"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits<(MaskMode)1, 128u>, Params>(Params)",
     "flashinfer-fa2"),
    ("kernel_unified_attention_2d", "triton-unified-attention (vLLM)"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<64, 64, 256, 4>, 4>(flash::Params)", None),
])
def test_attention_kernels_are_named_after_their_own_library(name, family):
    assert classify_backend(name, PATTERNS) == family


@pytest.mark.parametrize("fixture,args,family,attention", [
    (ef.SGLANG_MI300X, ["--layers", "36"], "ck_tile-fmha (AMD)", 36),
    (ef.HF_SDPA_H100, ["--layers", "24"], "sdpa-flash (PyTorch)", 34),
    (ef.VLLM_AMD_GRAPHS, ["--layers", "24"], "triton-unified-attention (vLLM)", 24),
    (ef.NSYS_2GPU, ["--layers", "30"], "flash-attn-2 (Dao)", 30),
])
def test_each_engine_trace_names_its_attention_kernels(tmp_path, fixture, args, family, attention):
    out = from_json(ef.unpack(fixture, tmp_path), *args)
    for r in out["ranks"]:
        assert r["backend"] == family and r["backends"] == {family: attention}
        assert r["cpbench_backend"] is None  # none of them is a kernel cpbench runs
        assert r["kernel_kinds"]["attention"] == attention


def test_a_pattern_matches_where_a_word_starts():
    from cpbench.profiles.kernels import classify

    dao = ("flash::flash_fwd_kernel",)
    assert classify("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Traits>(Params)", dao) == "other"
    assert classify("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(flash::Flash_fwd_params)", dao) == "attention"
    assert classify("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernel",
                    ("flashinfer::batchprefillwithpagedkvcachekernel",)) == "other"


NO_EVIDENCE = "consistent with one call per layer; no evidence of CP in this trace, pass --cp to judge fusion"


@pytest.mark.parametrize("fixture,layers,verdict", [
    (ef.SGLANG_MI300X, 36, "no CP (world size 1 in distributedInfo): 36 attention kernels per forward, one call per layer"),
    (ef.HF_SDPA_H100, 24, f"24 attention kernels per forward: {NO_EVIDENCE}"),
    (ef.VLLM_AMD_GRAPHS, 24, "no CP (world size 1 in distributedInfo): 24 attention kernels per forward, one call per layer"),
    (ef.NSYS_2GPU, 30, f"30 attention kernels per forward: {NO_EVIDENCE}"),
])
def test_no_engine_trace_is_called_fused_without_cp_evidence(tmp_path, fixture, layers, verdict):
    """None of them ran CP (world size 1, or no distributedInfo and no all-gather): one call per layer, not "fused"."""
    out = from_json(ef.unpack(fixture, tmp_path), "--layers", str(layers))
    for r in out["ranks"]:
        assert r["attention_kernels_per_forward"] == [layers] and r["verdict"] == verdict


def test_layers_are_split_by_kind_only_for_a_named_model_with_sliding_windows(tmp_path):
    """Qwen3 has no sliding window: its layers are one kind. The vLLM step is of a GPT-OSS-style model (24 layers,
    mxfp4 experts); read as gpt-oss-20b, its window layers take less than half the full layers' attention time."""
    sglang = ef.unpack(ef.SGLANG_MI300X, tmp_path)
    out = from_json(sglang, "--layers", "36")  # no model named: the default model's windows say nothing here
    assert out["layer_kinds"] == "all" and out["layer_kinds_reason"].startswith("no model named")
    assert [t["kind"] for t in out["ranks"][0]["layer_times_us"]] == ["all"]
    console = cpbench("profile", "--from", sglang, "--layers", "36").stdout
    assert "window layer" not in console and "layers not split into window and full: no model named" in console
    out = from_json(sglang, "--model", "qwen3-30b-a3b", "--layers", "36")
    assert out["layer_kinds"] == "all" and "has no sliding-window layer" in out["layer_kinds_reason"]
    out = from_json(ef.unpack(ef.VLLM_AMD_GRAPHS, tmp_path), "--model", "gpt-oss-20b")
    assert out["layer_kinds"] == "window/full" and out["layer_kinds_reason"] == ("gpt-oss-20b has a sliding window on "
                                                                                 "12 of 24 layers")
    window, full = out["ranks"][0]["layer_times_us"]
    assert (window["kind"], window["layers"], full["kind"], full["layers"]) == ("window", 12, "full", 12)
    assert 100 < window["median"] < full["median"] / 2 and full["median"] < 400


def test_unknown_kernels_are_listed_by_gpu_time_and_written_to_profile_json(tmp_path):
    """vLLM's step on an AMD GPU: its MoE and norm kernels are not cpbench's; each is listed with its count and
    time, the costliest first, on the console and in --out's profile.json."""
    trace = ef.unpack(ef.VLLM_AMD_GRAPHS, tmp_path)
    r = cpbench("profile", "--from", trace, "--layers", "24", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    (rank,) = json.loads((tmp_path / "out" / "profile.json").read_text())["ranks"]
    count, us = rank["unknown_kernels"], rank["unknown_kernels_us"]
    assert rank["kernel_kinds"] == {"attention": 24, "fill": 24, "copy": 1, "other": 364}  # 413 kernels
    assert set(count) == set(us) and sum(count.values()) == 364
    assert count["_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu"] == 24
    top = max(us, key=us.get)
    assert us[top] > 0 and f"kernels cpbench does not know, by GPU time: {top[:80]} x{count[top]} (" in r.stdout
    again = cpbench("profile", "--from", trace, "--layers", "24", "--out", tmp_path / "out")
    assert again.returncode == 2 and "holds an earlier result" in again.stderr


def test_sglangs_own_ranges_bound_its_forward(tmp_path):
    """SGLang's trace holds a 'step[EXTEND ...]' range inside an 'execute_...' one: '*' keeps the outer, 'step*'
    the inner; both hold the step's 36 attention kernels. A range it does not have is refused, naming those it has."""
    trace = ef.unpack(ef.SGLANG_MI300X, tmp_path)
    (r,) = from_json(trace, "--layers", "36", "--forward-range", "*")["ranks"]
    assert r["bound"] == "annotation" and r["nested_ranges"] == 1 and r["attention_kernels_per_forward"] == [36]
    (r,) = from_json(trace, "--layers", "36", "--forward-range", "step*")["ranks"]
    assert r["ranges_matched"] == 1 and r["attention_kernels_per_forward"] == [36]
    bad = cpbench("profile", "--from", trace, "--forward-range", "ProfilerStep#*")
    seen = "'execute_*_context_*(sq*sk*sqsq*sqsk*)_generation_*(sq*sk*sqsq*sqsk*)' x1, 'step[[]EXTEND bs=* toks=*]' x1"
    assert bad.returncode == 2 and f"ranges seen: {seen}" in bad.stderr
    (r,) = from_json(trace, "--layers", "36", "--forward-range", "step[[]EXTEND bs=* toks=*]")["ranks"]  # as said
    assert r["ranges_matched"] == 1 and r["attention_kernels_per_forward"] == [36]
