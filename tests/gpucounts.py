"""The kernel counts of one gpt-oss-120b forward per rank at cp 4 (2K tokens, bs 1), as torch.profiler classifies
them: shared by the backends' GPU tests (the count each asserts is its own)."""

import torch

from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset
from cpbench.kernels.backends import get_backend
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.profiles import capture, ranges


def gpt_oss_cp4_counts(backend: str, mode: str):
    """Yield ``(rank, capture.KernelCounts)`` of one profiled forward of each of the 4 ranks (36 layers, window
    and full alternating), after an unprofiled forward that loads the kernels."""
    spec = get_preset("gpt-oss-120b")
    cell = build_cell(spec, [2048], [0], page_size=64, dtype=torch.bfloat16, device="cuda")
    for g in all_ranks([2048], [0], 4):
        prep = get_backend(backend).prepare(rank_work(cell, g), mode)
        prep.forward()
        torch.cuda.synchronize()
        yield g.rank, capture.profile_forward(ranges.annotated_forward(prep, "x"), prep.kernel_patterns, "cuda")
