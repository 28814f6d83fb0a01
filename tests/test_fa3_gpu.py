"""fa3 (FlashAttention-3) on a Hopper GPU: two-call, fused and cp-native equal the fp32 reference on every rank
(sinks folded in from the kernel's log-sum-exp), the op called with ``out=`` gives what the public
``flash_attn_with_kvcache`` returns, and its kernels count 72 -> 36 attention kernels per rank for 36-layer
gpt-oss-120b at cp 4 (cp-native too), with the per-call scheduler counted as merge work, not attention.

Needs compute capability 9.0 and FlashAttention-3 (``import flash_attn_interface`` or ``sgl_kernel.flash_attn``);
skipped elsewhere: ``python -m pytest -q -n 0 -m gpu tests/test_fa3_gpu.py``.
"""

import pytest
import torch

from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.backends import get_backend
from cpbench.kernels.backends import flash_attn3 as fa3
from cpbench.kernels.check import TOLERANCE, max_abs_diff, max_abs_error
from cpbench.kernels.workload import build_cell, rank_work
from gpucounts import gpt_oss_cp4_counts

pytestmark = pytest.mark.gpu
MODES = ("two-call", "fused", "cp-native")


def _runs() -> bool:
    return torch.cuda.is_available() and get_backend("fa3").supports(
        torch.device("cuda"), get_preset("gpt-oss-120b"), torch.bfloat16) is None


needs_fa3 = pytest.mark.skipif(not _runs(), reason="needs compute capability 9.0 with FlashAttention-3")
BATCHES = [("bs1", [8192], [0]), ("bs4", [2048] * 4, [0] * 4), ("uneven", [3000, 8192], [0, 0]),
           ("prefix", [4099, 1000], [1, 512])]


@needs_fa3
@pytest.mark.parametrize("model,page_size", [("gpt-oss-120b", 64), ("gpt-oss-120b", 1), ("llama-3.1-8b", 64)])
@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("batch", BATCHES, ids=[b[0] for b in BATCHES])
def test_three_modes_equal_the_reference(model, page_size, cp, batch):
    spec = with_overrides(get_preset(model), layers=2)
    _, ext, pre = batch
    cell = build_cell(spec, ext, pre, page_size=page_size, dtype=torch.bfloat16, device="cuda", seed=cp)
    be = get_backend("fa3")
    for g in all_ranks(ext, pre, cp):
        work = rank_work(cell, g)
        preps = {m: be.prepare(work, m) for m in MODES}
        for p in preps.values():
            p.forward()
        torch.cuda.synchronize()
        for m, p in preps.items():
            err = max_abs_error(work, p)
            assert err <= TOLERANCE[torch.bfloat16], f"rank {g.rank} {m}: max |err| {err}"
        # split-KV may split 2*bs segments differently from bs: within bf16 rounding of each other
        assert max_abs_diff(preps["fused"], preps["two-call"]) <= 2 ** -6
        assert max_abs_diff(preps["cp-native"], preps["fused"]) <= 2 ** -6


@needs_fa3
def test_the_op_with_out_equals_the_public_call():
    from flash_attn_interface import flash_attn_with_kvcache

    spec = with_overrides(get_preset("gpt-oss-120b"), layers=2)
    cell = build_cell(spec, [3000, 8192], [0, 0], page_size=64, dtype=torch.bfloat16, device="cuda", seed=1)
    work = rank_work(cell, all_ranks([3000, 8192], [0, 0], 4)[0])
    for mode in MODES:
        p = get_backend("fa3").prepare(work, mode)
        p.forward()
        k, v = cell.layer_kv(1)  # the last layer (full)
        calls = fa3.mode_calls(work, mode, cell.block_tables, torch.cat([cell.block_tables, cell.block_tables]))
        for c in calls:
            want, lse, *_ = flash_attn_with_kvcache(
                work.q[c.rows[0]:c.rows[1]], k, v, cache_seqlens=c.cache_seqlens, page_table=c.page_table,
                cache_batch_idx=c.cache_batch_idx, cu_seqlens_q=c.cu_seqlens_q, max_seqlen_q=c.max_seqlen_q,
                causal=True, return_softmax_lse=True)
            assert lse.shape == (spec.num_q_heads, c.rows[1] - c.rows[0])
            assert torch.equal(p.outputs[-1][c.rows[0]:c.rows[1]], want), mode


@needs_fa3
@pytest.mark.parametrize("mode,attention", [("two-call", 72), ("fused", 36), ("cp-native", 36)])
def test_kernel_counts_gpt_oss_120b_cp4(mode, attention):
    for rank, c in gpt_oss_cp4_counts("fa3", mode):
        assert c.attention == attention, f"rank {rank}: {c.attention} attention kernels"
        # one scheduler kernel per call, plus a combine per call that splits KV: merge work, not attention
        assert attention <= c.merge <= 2 * attention and c.fill == 0 and c.copy == 0, (c.merge, c.fill, c.copy)
        print(f"rank {rank} {mode}: {c.attention} attention kernels, {c.merge} scheduler/combine, "
              f"{c.other} other, {c.launches} launches")
