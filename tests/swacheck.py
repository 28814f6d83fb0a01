"""The --swa-pool check the GPU backends' tests share: on a gpt-oss-120b-shaped cell with a separate SWA pool,
fused == two-call, both within the bf16 tolerance of the fp32 reference, and the window layers read the SWA
pool (spoiling its caches moves the window layers' outputs and leaves the full layers' as they were)."""

import torch

from cpbench.kernels.backends import get_backend
from cpbench.kernels.check import TOLERANCE, max_abs_diff, max_abs_error
from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work

# 4 layers (window 127, full, window 127, full): two caches a pool, so layers 0 and 2 read different SWA caches
SWA_MODEL = dict(layers=4)
SWA_BATCHES = [("bs4", [2048] * 4, [0] * 4), ("prefix", [4099, 1000], [1, 512])]


def _kind_diff(a: dict, b: dict, w: int) -> float:
    return (a[w].float() - b[w].float()).abs().max().item()


def check_swa_pool(backend: str, cp: int, ext: list[int], pre: list[int], fused_vs_two_call: float = 0.0,
                   other: str | None = None) -> None:
    """Assert, for every rank, max |fused - two-call| <= ``fused_vs_two_call``, both within
    ``TOLERANCE[bf16]`` of the fp32 reference (which reads the full pool through ``block_tables``: a window
    layer that read the SWA pool through another table would miss it), and, with ``other`` (a backend
    name), agreement with ``other``'s fused forward within the same tolerance; then, on the last rank,
    that adding 1 to the SWA pool's caches moves only the window layers' outputs."""
    spec = with_overrides(get_preset("gpt-oss-120b"), **SWA_MODEL)
    be = get_backend(backend)
    cell = build_cell(spec, ext, pre, page_size=spec.page_size, dtype=torch.bfloat16, device="cuda", seed=cp,
                      swa_pool=True)
    assert len(cell.swa_kv_buffers) == 2 and cell.swa_layer_buffer == [0, None, 1, None]
    tol = TOLERANCE[torch.bfloat16]
    for g in all_ranks(ext, pre, cp):
        work = rank_work(cell, g)
        two, fused = be.prepare(work, "two-call"), be.prepare(work, "fused")
        two.forward()
        fused.forward()
        torch.cuda.synchronize()
        diff = max_abs_diff(fused, two)
        assert diff <= fused_vs_two_call, f"rank {g.rank}: fused vs two-call {diff}"
        err = max(max_abs_error(work, prep) for prep in (fused, two))
        assert err <= tol, f"rank {g.rank}: max |err| {err}"
        if other is not None:
            o = get_backend(other).prepare(work, "fused")
            o.forward()
            torch.cuda.synchronize()
            vs = max_abs_diff(fused, o)
            assert vs <= tol, f"rank {g.rank}: vs {other} {vs}"
        print(f"{backend} --swa-pool cp{cp} {ext} r{g.rank}: max|err| {err:.2e}, max|fused - two-call| {diff:.2e}")
    before = {w: o.clone() for w, o in fused.local_outputs().items()}
    for pair in cell.swa_kv_buffers:
        for t in pair:
            t.add_(1.0)
    fused.forward()
    torch.cuda.synchronize()
    after = fused.local_outputs()
    full, window = _kind_diff(after, before, -1), _kind_diff(after, before, 127)
    assert full <= tol and window > 0.1, f"spoiled SWA pool: full layers moved {full}, window layers {window}"
