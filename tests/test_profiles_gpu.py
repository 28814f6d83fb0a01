"""profiles/ on CUDA (skipped without a GPU): kernels and launches counted separately, graph replay."""

import pytest
import torch

from cpbench.kernels.backends.torch_ref import TorchBackend
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.profiles import capture, ranges
from cpbench.profiles.kernels import ProfileError

pytestmark = pytest.mark.gpu
SEQ = [256]
GEMM = ("gemm",)  # the torch reference's matmuls stand in for attention kernels


@pytest.fixture(scope="module")
def cell():
    model = with_overrides(get_preset("gpt-oss-120b"), layers=36, heads=8, kv_heads=2, head_dim=64)
    return build_cell(model, SEQ, [0], page_size=16, dtype=torch.bfloat16, device="cuda")


def prepared(cell, rank, mode):
    p = TorchBackend().prepare(rank_work(cell, rank_geometry(SEQ, None, 4, rank)), mode)
    p.forward()
    torch.cuda.synchronize()
    return p


@pytest.mark.parametrize("mode,calls", [("two-call", 72), ("fused", 36)])
def test_cuda_counts(cell, mode, calls, tmp_path):
    p = prepared(cell, 0, mode)
    c = capture.profile_prepared(p, f"cp4 bs1 extend256 r0 {mode} eager", "cuda", tmp_path / "t")
    assert c.attention_calls == calls
    assert c.kernels > 0 and c.launches > 0 and c.attention == 0  # no patterns: calls only
    g = capture.profile_forward(ranges.annotated_forward(p, "x"), GEMM, "cuda")
    assert g.attention > 0 and g.attention % calls == 0
    assert capture.kernels_per_call(p.layers[0][0][1], GEMM, "cuda") * calls == g.attention
    with pytest.raises(ProfileError, match="no attention kernels"):
        capture.profile_forward(ranges.annotated_forward(p, "x"), ("nonexistent",), "cuda")


def test_cuda_graph_replay_is_one_launch(cell):
    p = prepared(cell, 1, "fused")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        p.forward()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        p.forward()
    eager = capture.profile_forward(ranges.annotated_forward(p, "x"), GEMM, "cuda")
    replay = capture.profile_forward(graph.replay, GEMM, "cuda")
    assert replay.launches == 1 and replay.attention == eager.attention
    assert replay.kernels == eager.kernels
