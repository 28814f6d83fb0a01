"""profiles/: ranges, classification, CPU capture of the torch backend, nsys argv and parsing."""

import gzip
import json

import pytest
import torch

from cpbench.kernels.backends.registry import kernel_patterns, known_attention_patterns
from cpbench.kernels.backends.torch_ref import TorchBackend
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.profiles import capture, kernels, nsys, ranges
from cpbench.profiles.kernels import KernelCounts, ProfileError, classify
from clirun import cpbench

SEQ = [256]
FA2 = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<...> >(...)"
FA3 = ("void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<flashinfer::"
       "DefaultAttention<false, true, false, false>, ..., flashinfer::BatchPrefillPagedParams<...> > >(...)")
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, ...>(...)"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"  # NCCL >= 2.19
FA2_PATTERNS, FA3_PATTERNS, TRTLLM_PATTERNS = (kernel_patterns(n) for n in ("flashinfer-fa2", "flashinfer-fa3",
                                                                            "trtllm-gen"))
KNOWN_ATTENTION_PATTERNS = known_attention_patterns()


@pytest.fixture(scope="module")
def cell():
    model = with_overrides(get_preset("gpt-oss-120b"), layers=36, heads=8, kv_heads=2, head_dim=16)
    return build_cell(model, SEQ, [0], page_size=16, dtype=torch.float32, device="cpu")


@pytest.fixture(autouse=True)
def one_thread():
    # tiny matmuls: intra-op threads only add contention (100x slower on small CI boxes)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def prepared(cell, rank, mode):
    return TorchBackend().prepare(rank_work(cell, rank_geometry(SEQ, None, 4, rank)), mode)


# ---------------------------------------------------------------- ranges


def test_annotated_forward_labels_and_nesting(cell, tmp_path):
    p = prepared(cell, 0, "two-call")
    fwd = ranges.annotated_forward(p, "cp4 bs1 extend256 r0 two-call eager", {"cp": 4, "rank": 0})
    events = capture.trace_events(fwd, "cpu", trace_path=tmp_path / "t")
    ann = [e for e in events if e.get("cat") == "user_annotation"]
    names = [e["name"] for e in ann]
    assert names.count("cp4 bs1 extend256 r0 two-call eager") == 1
    assert [n for n in names if n.startswith("layer")] == [f"layer{i}" for i in range(36)]
    assert names.count("prev") == names.count("next") == 36 and "combined" not in names
    # nesting: every call lies inside a layer, every layer inside the cell range
    top = next(e for e in ann if e["name"].startswith("cp4"))
    layer0 = next(e for e in ann if e["name"] == "layer0")
    first_prev = min((e for e in ann if e["name"] == "prev"), key=lambda e: e["ts"])
    assert top["ts"] <= layer0["ts"] <= first_prev["ts"]
    assert first_prev["ts"] + first_prev["dur"] <= layer0["ts"] + layer0["dur"] <= top["ts"] + top["dur"]
    assert (tmp_path / "t.json.gz").exists()


def test_annotated_forward_runs_same_work(cell):
    p = prepared(cell, 1, "fused")
    p.forward()
    want = {w: o.clone() for w, o in p.outputs.items()}
    for o in p.outputs.values():
        o.zero_()
    ranges.annotated_forward(p, "x", nvtx_on=True)()
    for w, o in p.outputs.items():
        assert torch.equal(o, want[w])


def test_ranges_without_nvtx_or_record():
    p = type("P", (), {"layers": [[("combined", lambda: None)]]})()
    ranges.annotated_forward(p, "x", nvtx_on=False, record_functions=False)()  # no error


def test_range_overhead_is_small_and_positive():
    us = ranges.range_overhead_us(200)
    assert 0 < us < 1000


def test_nvtx_payload():
    assert ranges.nvtx_payload(None) is None
    assert ranges.nvtx_payload({"mode": "fused"}) is None
    assert ranges.nvtx_payload({"seq": 8192}) == 8192
    arr = ranges.nvtx_payload({"cp": 4, "bs": 1, "seq": 8192, "rank": 0, "mode": "fused"})
    assert arr.dtype.names == ("cp", "bs", "seq", "rank") and int(arr["seq"]) == 8192


# ---------------------------------------------------------------- capture (CPU: attention calls)


@pytest.mark.parametrize("mode,per_rank", [("two-call", 72), ("fused", 36)])
def test_attention_calls_per_rank_gpt_oss_120b(cell, mode, per_rank):
    total = 0
    for rank in range(4):
        p = prepared(cell, rank, mode)
        counts = capture.profile_prepared(p, f"cp4 bs1 extend256 r{rank} {mode} eager", "cpu")
        assert counts.attention_calls == per_rank
        assert counts.kernels == 0  # CPU: no GPU activity
        assert capture.expected_for(p) == per_rank
        total += counts.attention_calls
    assert total == 4 * per_rank  # 288 two-call, 144 fused


def test_profile_forward_writes_gzip_trace_of_one_step(cell, tmp_path):
    p = prepared(cell, 2, "fused")
    fwd = ranges.annotated_forward(p, "cell")
    counts = capture.profile_forward(fwd, (), "cpu", tmp_path / "sub" / "rank2.json", steps_warmup=2)
    path = tmp_path / "sub" / "rank2.json.gz"
    data = json.loads(gzip.open(path, "rt").read())
    steps = [e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep")]
    assert len(steps) == 1  # the active step only
    assert counts.attention_calls == 36
    assert kernels.count_events(data["traceEvents"]).attention_calls == 36


def test_profile_forward_without_ranges_raises(cell):
    p = prepared(cell, 0, "fused")
    with pytest.raises(ProfileError, match="annotated_forward"):
        capture.profile_forward(p.forward, (), "cpu", None)


def test_kernels_per_call_needs_cuda():
    with pytest.raises(ProfileError):
        capture.kernels_per_call(lambda: None, ("fmha",), "cpu")


def test_measure_call_counts_one_call_on_cpu():
    counts = capture.measure_call(lambda: torch.ones(4).sum(), (), "cpu", name="prev")
    assert counts.attention_calls == 1


def test_gz_trace_path():
    assert capture.gz_trace_path("a/b.json").name == "b.json.gz"
    assert capture.gz_trace_path("a/b.json.gz").name == "b.json.gz"
    assert capture.gz_trace_path("a/rank0").name == "rank0.json.gz"


# ---------------------------------------------------------------- kernels


@pytest.mark.parametrize("name,patterns,kind", [
    (FA2, FA2_PATTERNS, "attention"),
    (FA3, FA3_PATTERNS, "attention"),
    (FA2, FA3_PATTERNS, "other"),  # the flashinfer-fa3 pattern must not match flashinfer-fa2
    (FA3, FA2_PATTERNS, "other"),
    ("fmhaSm100Kernel_QkvBfloat16OBfloat16H64PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
     TRTLLM_PATTERNS, "attention"),
    ("void flashinfer::MergeStatesKernel<8u, 16u, 1u, 4u, __nv_bfloat16, float>(...)", ("flashinfer",), "merge"),
    ("void flashinfer::MergeStateInPlaceKernel<8u, 16u, 1u, 4u, __nv_bfloat16>(...)", (), "merge"),
    (FILL, KNOWN_ATTENTION_PATTERNS, "fill"),
    ("Memset (Device)", (), "fill"),
    ("Memcpy DtoD (Device -> Device)", (), "copy"),
    ("void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(...)>(...)", (), "copy"),
    ("ampere_sgemm_128x64_tn", KNOWN_ATTENTION_PATTERNS, "other"),
    (NCCL_AG, KNOWN_ATTENTION_PATTERNS, "comm"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", ("flashinfer",), "comm"),  # NCCL < 2.19
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ("nccl",), "comm"),
    ("", (), "other"),
])
def test_classify(name, patterns, kind):
    assert classify(name, patterns) == kind


def test_launch_apis():
    for name in ("cudaLaunchKernel", "cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cudaGraphLaunch",
                 "cudaLaunchKernelExC_v11060", "cudaGraphLaunch_v10000"):
        assert kernels.is_launch_api(name), name
    for name in ("cudaMemsetAsync", "cudaStreamSynchronize", "cudaLaunchHostFunc", ""):
        assert not kernels.is_launch_api(name), name


def test_count_events_tolerates_junk():
    events = [None, 3, {}, {"ph": "M", "cat": "kernel", "name": FA2}, {"cat": "kernel", "name": FA2, "ts": 0},
              {"ph": "X", "cat": "kernel", "name": 7}, {"ph": "X", "cat": None, "name": FA2},
              {"ph": "X", "cat": "gpu_user_annotation", "name": "prev"},
              {"ph": "X", "cat": "user_annotation", "name": "prev", "ts": 0, "dur": 0}]
    c = kernels.count_events(events, FA2_PATTERNS)
    assert (c.attention, c.kernels, c.attention_calls) == (1, 1, 1)
    assert c.kernel_names == {FA2: 1}


def test_count_events_empty_raises_when_required():
    assert kernels.count_events([], ()).kernels == 0
    with pytest.raises(ProfileError, match="no attention kernels"):
        kernels.count_events([], FA2_PATTERNS, require_attention=True)


def test_count_events_keeps_collectives_apart_from_attention():
    # a cp forward with one NCCL all-gather per layer: 36 layers, fused (one attention kernel each)
    events = [{"ph": "X", "cat": "kernel", "name": n} for _ in range(36) for n in (NCCL_AG, FA2)]
    c = kernels.count_events(events, FA2_PATTERNS, require_attention=True)
    assert (c.attention, c.comm, c.other, c.kernels) == (36, 36, 0, 72)
    assert c.to_row()["comm_kernels"] == 36 and c.to_row()["attention_kernels"] == 36


def test_kernel_counts_row_and_expected():
    c = KernelCounts()
    c.add(FA2, "attention", 72)
    c.add(FILL, "fill", 72)
    assert c.to_row()["attention_kernels"] == 72 and c.kernels == 144
    assert kernels.expected_attention_kernels(36, 2, 1) == 72
    assert kernels.expected_attention_kernels(36, 1, 1) == 36
    with pytest.raises(ValueError):
        kernels.expected_attention_kernels(36, -1, 1)


# ---------------------------------------------------------------- nsys


def test_nsys_argv_and_find(tmp_path, monkeypatch):
    argv = nsys.nsys_profile_argv(tmp_path / "rank0", ["python3", "-m", "cpbench", "profile"], "/x/nsys")
    assert argv[:2] == ["/x/nsys", "profile"]
    assert argv[argv.index("-t") + 1] == "cuda,nvtx"
    assert "--capture-range=cudaProfilerApi" in argv and "--capture-range-end=stop" in argv
    assert argv[argv.index("-o") + 1] == str(tmp_path / "rank0")
    assert argv[argv.index("--force-overwrite") + 1] == "true"
    assert argv[-4:] == ["python3", "-m", "cpbench", "profile"]
    assert "--cuda-graph-trace=node" not in nsys.nsys_profile_argv(tmp_path, ["a"], graph_nodes=False)
    s = nsys.stats_argv(tmp_path / "r.nsys-rep", "/x/nsys")
    assert s[:4] == ["/x/nsys", "stats", "-r", "nvtx_kern_sum"] and "csv" in s and s[-1].endswith(".nsys-rep")
    # find_nsys: PATH first, then the install globs
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert nsys.find_nsys() == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(nsys, "NSYS_GLOBS", (str(tmp_path / "opt" / "*" / "nsys"),))
    assert nsys.find_nsys() is None
    (tmp_path / "opt" / "2025.1").mkdir(parents=True)
    (tmp_path / "opt" / "2025.3").mkdir(parents=True)
    for v in ("2025.1", "2025.3"):
        f = tmp_path / "opt" / v / "nsys"
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    assert nsys.find_nsys() == str(tmp_path / "opt" / "2025.3" / "nsys")  # newest first


def test_report_path(tmp_path):
    with pytest.raises(ProfileError, match="no report"):
        nsys.report_path(tmp_path / "r0")
    (tmp_path / "r0.qdstrm").write_text("")
    with pytest.raises(ProfileError, match="qdstrm"):
        nsys.report_path(tmp_path / "r0")
    (tmp_path / "r0.nsys-rep").write_text("")
    assert nsys.report_path(tmp_path / "r0") == tmp_path / "r0.nsys-rep"


def test_qdstrm_importer_beside_nsys(tmp_path, monkeypatch):
    host = tmp_path / "nsight-compute" / "2025.3.1" / "host"
    exe = host / "target-linux-x64" / "nsys"
    imp = host / "linux-desktop-glibc_2_11_3-x64" / "QdstrmImporter"
    for f in (exe, imp):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert nsys.find_qdstrm_importer(str(exe)) == str(imp)
    assert nsys.import_qdstrm_argv(tmp_path / "r0.qdstrm", str(imp)) == [str(imp), "-f", "-i", str(tmp_path / "r0.qdstrm")]


@pytest.mark.parametrize("raw,split", [
    ("cpbench:layer0", ("cpbench", "layer0")), ("cpbench@prev", ("cpbench", "prev")),
    (":warmup", ("", "warmup")), ("cpbench:cp4 bs1 extend8192 r0 fused eager", ("cpbench", "cp4 bs1 extend8192 r0 fused eager")),
    ("cp4 bs1: odd", ("", "cp4 bs1: odd")), ("", ("", "")),
])
def test_split_range_name(raw, split):
    assert nsys.split_range_name(raw) == split


def test_parse_nvtx_kern_sum_variants():
    text = ("Processing [x.sqlite] with [nvtx_kern_sum.py]...\n"
            "Range,Kern Inst,Total Time (us),Name\n"
            f'cpbench:combined,"1,024",2.5,"{FA2}"\n'
            f'cpbench:combined,36,1.0,"{FILL}"\n'
            "\nnot,part,of,it\n")
    rows = nsys.parse_nvtx_kern_sum(text)
    assert len(rows) == 2 and rows[0]["kernel_instances"] == 1024 and rows[0]["total_time"] == 2.5
    per = nsys.kernels_per_range(rows, FA2_PATTERNS)
    assert (per["combined"].attention, per["combined"].fill) == (1024, 36)
    assert nsys.kernels_per_range(rows, FA2_PATTERNS, domain="other") == {}
    with pytest.raises(ProfileError):
        nsys.parse_nvtx_kern_sum("Processing...\nno table here\n")


TINY = ["--layers", "4", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--page-size", "16"]


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU


def test_profile_cli_json_counts_and_traces(tmp_path, no_gpu):
    r = cpbench("profile", "--backend", "torch", "--cp", "4", "--bs", "1", "--seq", "64", "--json", "--out", str(tmp_path), *TINY)
    assert r.returncode == 0, r.stderr[-1000:]
    cell = json.loads(r.stdout)["cells"][0]
    assert cell["total"] == {"two-call": 32, "fused": 16,  # 4 layers x (2 | 1) calls x 4 ranks
                             "ranks": [0, 1, 2, 3], "all_ranks": True, "ranks_label": "all 4 ranks"}
    assert {(x["mode"], x["attn_calls"]) for x in cell["per_rank"]} == {("two-call", 8), ("fused", 4)}
    assert len(list((tmp_path / "profiles").glob("*.json.gz"))) == 8  # ranks x modes
    assert json.loads((tmp_path / "profile.json").read_text())["cells"][0]["total"] == cell["total"]


@pytest.mark.parametrize("args,needle", [
    (["--seq-lens", "64,96", "--bs", "2"], "--seq-lens gives the whole batch"),
    (["--seq", ""], "--seq is empty"),
    (["--backend", "flashinfer-fa3"], "flashinfer-fa3 needs a CUDA GPU"),
])
def test_profile_cli_bad_input_one_line_exit_2(tmp_path, no_gpu, args, needle):
    r = cpbench("profile", "--out", str(tmp_path / "p"), *TINY, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and needle in r.stderr, r.stderr[-1000:]
    assert len(r.stderr.strip().splitlines()) == 1
