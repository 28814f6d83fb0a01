"""A small CPU sweep configuration for in-process sweep tests: the same object the CLI builds."""

from __future__ import annotations

import torch

from cpbench.commands.sweep import SweepOutput, make_config
from cpbench.domain.cells import Batch
from cpbench.domain.models import get_preset, with_overrides

TINY_MODEL = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=16, page_size=16)


def grid_config(backend: str = "torch", *, bs_list=(1,), extend_len_list=(64,), prefix: int = 0, **fields):
    """A SweepConfig of ``bs_list`` x ``extend_len_list`` on the CPU (fp32, 5 ms budget, no warm-up, no profiler),
    built with ``make_config`` as the CLI builds it; ``fields`` override any SweepConfig field."""
    batches = tuple(Batch.uniform((seq,) * bs, prefix) for bs in bs_list for seq in extend_len_list)
    base = dict(model=TINY_MODEL, cp_sizes=(2,), batches=batches, device=torch.device("cpu"), budget_ms=5,
                warmup=0, dtype="fp32", profile=False,
                cells_from=(("bs_list", list(bs_list)), ("extend_len_list", list(extend_len_list)), ("extend_lens", None),
                            ("prefix", prefix)))
    return make_config(backend, **{**base, **fields})


def output(out, *, resume=False, report=False, allow_mismatch=False, keep_going=False) -> SweepOutput:
    return SweepOutput(out, resume, report, allow_mismatch, keep_going)
