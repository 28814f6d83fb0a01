"""Torch reference: fused == two-call exactly; all ranks in token order == non-CP attention."""

import pytest
import torch

from cpbench.kernels.backends.torch_ref import TorchBackend, attend, sequence_reference
from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work

TOL = 2e-5  # fp32: same math, different query-row blocking


def tiny(name, **kw):
    base = dict(layers=2, heads=8, kv_heads=2, head_dim=16)
    base.update(kw)
    return with_overrides(get_preset(name), **base)


MODELS = {
    "window+sinks": tiny("gpt-oss-120b", window=8),
    "full, no sinks": tiny("llama-3.1-8b"),
    "window, no sinks": tiny("llama-3.1-8b", window=5),
    "full+sinks": tiny("llama-3.1-8b", sinks=True),
}


def check_cell(model, ext, pre, cp, page_size=16):
    cell = build_cell(model, ext, pre, page_size=page_size, dtype=torch.float32, device="cpu", seed=7)
    truth = {w: torch.cat([sequence_reference(cell, s, model.last_layer(w)) for s in range(len(ext))])
             for w in model.layer_kinds}
    seen = torch.zeros(sum(ext), dtype=torch.int64)
    for g in all_ranks(ext, pre, cp):
        work = rank_work(cell, g)
        two = TorchBackend().prepare(work, "two-call")
        fused = TorchBackend().prepare(work, "fused")
        two.forward()
        fused.forward()
        for w in model.layer_kinds:
            assert torch.equal(two.outputs[w], fused.outputs[w])
            err = (fused.outputs[w] - truth[w][work.token_index]).abs().max().item()
            assert err < TOL, (g.rank, w, err)
        seen[work.token_index] += 1
    assert seen.tolist() == [1] * sum(ext)  # every real token computed exactly once


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("cp", [2, 4])
def test_fused_equals_two_call_equals_non_cp(name, cp):
    check_cell(MODELS[name], [37, 64, 16], [5, 0, 20], cp)


def test_cp2_seven_tokens_no_token_dropped():
    check_cell(MODELS["window+sinks"], [7], [0], 2)


def test_prefix_one():
    check_cell(MODELS["full, no sinks"], [61], [1], 4, page_size=4)


def test_attend_matches_sdpa_without_sinks():
    torch.manual_seed(0)
    q, k, v = torch.randn(5, 4, 8), torch.randn(9, 2, 8), torch.randn(9, 2, 8)
    out = attend(q, k, v)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    mask = torch.ones(5, 9, dtype=torch.bool).tril(diagonal=4)  # bottom-right aligned
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), attn_mask=mask).transpose(0, 1)
    assert (out - ref).abs().max() < 1e-5


def test_sinks_add_to_denominator():
    q, k, v = torch.zeros(1, 1, 4), torch.zeros(3, 1, 4), torch.ones(3, 1, 4)
    sinks = torch.tensor([0.0])
    # three equal logits 0 plus a sink logit 0: each value gets weight 1/4
    assert torch.allclose(attend(q, k, v, sinks=sinks), torch.full((1, 1, 4), 0.75))


def test_window_left_inclusive():
    q, k = torch.zeros(1, 1, 2), torch.zeros(10, 1, 2)
    v = torch.arange(10.0).view(10, 1, 1).expand(10, 1, 2).contiguous()
    out = attend(q, k, v, window_left=2)  # query at position 9 sees keys 7, 8, 9
    assert torch.allclose(out, torch.full((1, 1, 2), 8.0))
