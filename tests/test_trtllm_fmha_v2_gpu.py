"""trtllm-fmha-v2 on a Hopper GPU: the PR's fused call == the two calls == the fp32 reference, it agrees
with flashinfer-fa3, and its kernels count 72 -> 36 attention launches per rank for 36-layer gpt-oss-120b at cp 4,
plus one device memset per call (counted as a fill, not attention).

Needs a GPU of compute capability 9.x/12.x with flashinfer; skipped elsewhere:
`python -m pytest -q -n 0 -m gpu tests/test_trtllm_fmha_v2_gpu.py`.
"""

import pytest
import torch

from cpbench.kernels.backends import get_backend
from cpbench.kernels.backends.registry import BACKENDS
from cpbench.kernels.check import TOLERANCE, max_abs_diff, max_abs_error
from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work
from gpucounts import gpt_oss_cp4_counts
from swacheck import SWA_BATCHES, check_swa_pool

pytestmark = pytest.mark.gpu
MODELS = {"gpt-oss-120b": dict(layers=2), "llama-3.1-8b": dict(layers=1)}
BATCHES = [("bs1", [8192], [0]), ("bs4", [2048] * 4, [0] * 4), ("uneven", [3000, 8192], [0, 0]),
           ("prefix", [4099, 1000], [1, 512])]


def _runs() -> bool:
    if not torch.cuda.is_available():
        return False
    return get_backend("trtllm-fmha-v2").supports(torch.device("cuda"), get_preset("gpt-oss-120b"),
                                                  torch.bfloat16) is None


needs_gpu = pytest.mark.skipif(not _runs(), reason="needs a 9.x/12.x GPU with flashinfer for trtllm-fmha-v2")


@needs_gpu
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("cp", [2, 4, 8])
@pytest.mark.parametrize("batch", BATCHES, ids=[b[0] for b in BATCHES])
def test_fused_equals_two_call_and_reference(model, cp, batch):
    spec = with_overrides(get_preset(model), **MODELS[model])
    be = get_backend("trtllm-fmha-v2")
    _, ext, pre = batch
    cell = build_cell(spec, ext, pre, page_size=spec.page_size, dtype=torch.bfloat16, device="cuda", seed=cp)
    fa3 = get_backend("flashinfer-fa3") if BACKENDS["flashinfer-fa3"].runs_on(torch.cuda.get_device_capability()) else None
    for g in all_ranks(ext, pre, cp):
        work = rank_work(cell, g)
        two, fused = be.prepare(work, "two-call"), be.prepare(work, "fused")
        two.forward()
        fused.forward()
        torch.cuda.synchronize()
        assert max_abs_diff(fused, two) == 0.0, f"rank {g.rank}: fused differs from two-call"
        err = max(max_abs_error(work, prep) for prep in (fused, two))
        assert err <= TOLERANCE[torch.bfloat16], f"rank {g.rank}: max |err| {err}"
        if fa3 is not None:
            other = fa3.prepare(work, "fused")
            other.forward()
            torch.cuda.synchronize()
            vs_fa3 = max_abs_diff(fused, other)
            assert vs_fa3 <= TOLERANCE[torch.bfloat16], f"rank {g.rank}: vs flashinfer-fa3 {vs_fa3}"
        print(f"trtllm-fmha-v2 {model} cp{cp} {batch[0]} r{g.rank}: max|err| {err:.2e}, fused == two-call")


@needs_gpu
@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("batch", SWA_BATCHES, ids=[b[0] for b in SWA_BATCHES])
def test_swa_pool_window_layers_read_their_own_table(cp, batch):
    """--swa-pool: window layers pass the SWA pool's K/V block offsets (fused: of cat(t, t)) into its own
    [2, pages, ...] allocation; fused == two-call == the fp32 reference, and it agrees with flashinfer-fa3 where it
    runs."""
    _, ext, pre = batch
    fa3 = "flashinfer-fa3" if BACKENDS["flashinfer-fa3"].runs_on(torch.cuda.get_device_capability()) else None
    check_swa_pool("trtllm-fmha-v2", cp, ext, pre, other=fa3)


@needs_gpu
@pytest.mark.parametrize("mode,attention", [("two-call", 72), ("fused", 36)])
def test_kernel_counts_gpt_oss_120b_cp4(mode, attention):
    for rank, c in gpt_oss_cp4_counts("trtllm-fmha-v2", mode):
        assert c.attention == attention, f"rank {rank}: {c.attention} attention kernels"
        assert c.fill == attention and c.other == 0 and c.copy == 0, (c.fill, c.other, c.copy)  # one memset per call
        print(f"rank {rank} {mode}: {c.attention} attention kernels, {c.fill} memsets, {c.launches} launches")
