"""The flex backend compiled on a GPU (the kernel the H200 runs time), at the window edge: W-1, W and W+1 around
a 16-token page, on a window layer and a full layer, with sinks and a cached prefix, in bf16. All three modes
are within flex's bf16 tolerance (0.02 + 2^-6, domain/tolerance.py) of the fp32 reference on every rank (the
mask reads its window from a tensor, so a kernel compiled for one window cannot serve another unnoticed),
fused equals two-call bit for bit (the
same rows, regrouped), cp-native is within the tolerance of two-call, and all are within it of flashinfer-fa3 on
the same cache where flashinfer-fa3 runs.

`python -m pytest -q -n 0 -m gpu tests/test_flex_gpu.py`; skipped without CUDA.
"""

import pytest
import torch

from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.backends import get_backend
from cpbench.domain.tolerance import reference_tolerance
from cpbench.kernels.check import max_abs_error, max_diff_outputs
from cpbench.kernels.workload import build_cell, rank_work

pytestmark = pytest.mark.gpu
TOL = reference_tolerance("bf16", "flex")  # the dtype's, plus the sink fold's second rounding


def _fa3():
    """flashinfer-fa3 where it runs (compute capability 9.0 and flashinfer), else None."""
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return None
    return get_backend("flashinfer-fa3") if torch.cuda.get_device_capability() == (9, 0) else None


@pytest.mark.parametrize("window", [15, 16, 17])
def test_compiled_flex_at_the_window_edge_equals_the_reference_and_fa3(window):
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, window=window)
    assert model.has_sinks and sorted(model.layer_kinds) == [-1, window - 1]
    ext, pre = [300, 1000], [0, 48]
    cell = build_cell(model, ext, pre, page_size=16, dtype=torch.bfloat16, device="cuda", seed=window)
    flex, fa3 = get_backend("flex"), _fa3()
    for g in all_ranks(ext, pre, 4):
        work = rank_work(cell, g)
        outs = {}
        for mode in ("two-call", "fused", "cp-native"):
            p = flex.prepare(work, mode)
            p.forward()
            torch.cuda.synchronize()
            err = max_abs_error(work, p)
            assert err <= TOL, (g.rank, mode, err)
            outs[mode] = {w: o.clone() for w, o in p.local_outputs().items()}
        assert max_diff_outputs(outs["two-call"], outs["fused"]) == 0.0, g.rank
        diff = max_diff_outputs(outs["two-call"], outs["cp-native"])
        print(f"window {window} rank {g.rank}: cp-native vs two-call {diff}")
        assert diff <= TOL, (g.rank, diff)
        if fa3 is not None:
            p = fa3.prepare(work, "two-call")
            p.forward()
            torch.cuda.synchronize()
            diff = max_diff_outputs(outs["cp-native"], p.local_outputs())
            print(f"window {window} rank {g.rank}: cp-native vs flashinfer-fa3 {diff}")
            assert diff <= TOL, (g.rank, diff)
