"""SDPA path of the torch reference == the explicit reference path (fp32 rounding), on every preset shape."""

import pytest
import torch

from cpbench.kernels.backends import torch_ref
from cpbench.kernels.backends.torch_ref import TorchBackend, attend, attend_reference, attend_sdpa
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.models import PRESETS, with_overrides
from cpbench.kernels.workload import build_cell, rank_work

TOL = 1e-5  # fp32, unit-normal inputs, outputs O(1)

# (q_len, kv_len): uneven, q == kv, one row, q much shorter than kv
SHAPES = [(37, 101), (48, 48), (1, 9), (16, 300)]


def _case(hq, hkv, d, q_len, kv_len, sinks, n=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    lead = () if n is None else (n,)
    q = torch.randn(*lead, q_len, hq, d, generator=g)
    k = torch.randn(*lead, kv_len, hkv, d, generator=g)
    v = torch.randn(*lead, kv_len, hkv, d, generator=g)
    s = torch.randn(hq, generator=g) if sinks else None
    return q, k, v, s


@pytest.fixture(params=[True, False], ids=["lse", "zero-key"])
def sink_path(request, monkeypatch):
    """Both ways of adding the sink: the CPU flash kernel's log-sum-exp, and the public zero-key form."""
    if not request.param:
        monkeypatch.setattr(torch_ref, "_CPU_FLASH_LSE", None)
    return request.param


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("q_len,kv_len", SHAPES)
def test_presets(name, q_len, kv_len, sink_path):
    m = PRESETS[name]
    for w in m.layer_kinds:  # window layers (window_left) and full layers
        for sinks in {m.has_sinks, not m.has_sinks}:
            q, k, v, s = _case(m.num_q_heads, m.num_kv_heads, m.head_dim, q_len, kv_len, sinks)
            err = (attend_sdpa(q, k, v, w, s) - attend_reference(q, k, v, w, s)).abs().max().item()
            assert err < TOL, (name, w, sinks, err)


@pytest.mark.parametrize("window_left", [-1, 0, 3, 127, 5000])  # 5000: window larger than kv
@pytest.mark.parametrize("q_len,kv_len", SHAPES)
def test_windows_gqa_batched(window_left, q_len, kv_len, sink_path):
    for hq, hkv, sinks in ((8, 2, True), (8, 8, False), (6, 1, True)):
        q, k, v, s = _case(hq, hkv, 16, q_len, kv_len, sinks, n=3)
        err = (attend_sdpa(q, k, v, window_left, s) - attend_reference(q, k, v, window_left, s)).abs().max().item()
        assert err < TOL, (hq, hkv, err)


@pytest.mark.parametrize("row_block,key_align", [(1, 1), (8, 16), (16, 16), (64, 1), (64, 32)])
def test_query_row_blocks(row_block, key_align, monkeypatch, sink_path):
    """Any row-block size / key alignment (each block reads only its visible keys, widened to the alignment)
    gives the reference; window 0 and 3 < block - 1 leave blocks with no key visible to all their rows."""
    monkeypatch.setattr(torch_ref, "SDPA_ROW_BLOCK", row_block)
    monkeypatch.setattr(torch_ref, "SDPA_KEY_ALIGN", key_align)
    for q_len, kv_len in ((50, 90), (37, 37), (5, 200)):
        for window_left in (-1, 0, 3, 7, 40):
            for sinks in (True, False):
                q, k, v, s = _case(8, 2, 16, q_len, kv_len, sinks)
                err = (attend_sdpa(q, k, v, window_left, s) - attend_reference(q, k, v, window_left, s)).abs().max()
                assert err.item() < TOL, (q_len, kv_len, window_left, sinks, err)


@pytest.mark.parametrize("window_left", [-1, 0, 5])
def test_block_mask(window_left):
    """The cached right-aligned mask, cut to ``cols`` columns, is the explicit causal / window mask."""
    for rows, cols, right in ((1, 1, 1), (4, 9, 4), (16, 144, 16), (3, 70, 40), (16, 512, 20)):
        pos = torch.arange(cols - right, cols - right + rows)[:, None]
        keys = torch.arange(cols)[None, :]
        allowed = (keys <= pos) & ((keys >= pos - window_left) if window_left >= 0 else True)
        want = torch.zeros(rows, cols).masked_fill(~allowed, float("-inf")).repeat(2, 1)
        assert torch.equal(torch_ref._block_mask(rows, cols, right, window_left, 2, torch.device("cpu")), want)


def test_out_dtype_and_method():
    q, k, v, s = _case(4, 2, 8, 5, 9, True)
    out = torch.empty_like(q, dtype=torch.bfloat16)
    o = attend_sdpa(q, k, v, -1, s, out=out)
    assert o.dtype == torch.bfloat16 and o.data_ptr() == out.data_ptr()
    assert (out.float() - attend_reference(q, k, v, -1, s)).abs().max().item() < 1e-2
    assert torch.equal(attend(q, k, v, -1, s), attend_sdpa(q, k, v, -1, s))  # auto on CPU = SDPA
    assert torch.equal(attend(q, k, v, -1, s, method="reference"), attend_reference(q, k, v, -1, s))
    with pytest.raises(ValueError, match="unknown attention method"):
        attend(q, k, v, method="flash")


@pytest.mark.parametrize("mode", ["two-call", "fused"])
def test_torch_backend_forward_unchanged(mode, monkeypatch):
    model = with_overrides(PRESETS["gpt-oss-120b"], layers=2, heads=8, kv_heads=2, head_dim=16, window=8)
    ext, pre = [37, 64], [5, 0]
    cell = build_cell(model, ext, pre, page_size=16, dtype=torch.float32, device="cpu", seed=3)
    work = rank_work(cell, rank_geometry(ext, pre, 2, 0))
    new = TorchBackend().prepare(work, mode)
    new.forward()
    monkeypatch.setattr(torch_ref, "attend", lambda *a, **kw: attend_reference(*a, **kw))
    old = TorchBackend().prepare(work, mode)
    old.forward()
    for w in model.layer_kinds:
        assert (new.outputs[w] - old.outputs[w]).abs().max().item() < TOL
