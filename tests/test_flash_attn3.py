"""The fa3 backend (FlashAttention-3, kernels/backends/flash_attn3.py) without the kernel: its call arguments on
the zigzag test vectors, and its three modes run through an emulation of ``flash_attn_3::fwd``'s documented
semantics (paged KV through ``page_table`` or ``cache_batch_idx``, bottom-right causal, ``window_size``) equal the
fp32 reference with sinks folded in; without the kernel it is unsupported with how to get it."""

import sys

import pytest
import torch

from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.backends import flash_attn3 as fa3
from cpbench.kernels.backends import get_backend
from cpbench.kernels.backends.registry import BACKENDS, resolve_auto
from cpbench.kernels.check import max_abs_error
from cpbench.kernels.kv import duplicate_block_tables
from cpbench.kernels.workload import build_cell, rank_work

CPU = torch.device("cpu")


def emulated_fwd(q, k, v, *, out, cu_seqlens_q, seqused_k, max_seqlen_q, page_table, kv_batch_idx, softmax_scale,
                 is_causal, window_size_left, window_size_right, num_splits):
    """``flash_attn_3::fwd`` as hopper/flash_api.cpp documents it, in fp32: segment b's keys are tokens
    ``[0, seqused_k[b])`` of page-table row ``kv_batch_idx[b]`` (or ``b``), query i sits at ``kv_len - q_len + i``
    and sees keys up to it and, with a window, from ``pos - window_size_left``. Writes ``out``, returns
    ``(out, lse [Hq, total_q])``."""
    assert is_causal and window_size_right in (0, -1) and num_splits == 0
    assert page_table.dtype == torch.int32 and cu_seqlens_q.dtype == torch.int32 and seqused_k.dtype == torch.int32
    n = len(seqused_k)
    if kv_batch_idx is None:
        assert page_table.shape[0] == n, "without cache_batch_idx the table has a row per segment"
    page = k.shape[1]
    hq, hk = q.shape[1], k.shape[2]
    lse = torch.empty(hq, q.shape[0], dtype=torch.float32)
    for b in range(n):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        assert q1 - q0 <= max_seqlen_q
        kv_len = int(seqused_k[b])
        row = page_table[int(kv_batch_idx[b]) if kv_batch_idx is not None else b]
        slots = [int(row[t // page]) * page + t % page for t in range(kv_len)]
        kk = k.reshape(-1, hk, k.shape[-1])[slots].float().repeat_interleave(hq // hk, 1)  # [kv, Hq, D]
        vv = v.reshape(-1, hk, v.shape[-1])[slots].float().repeat_interleave(hq // hk, 1)
        s = torch.einsum("qhd,khd->hqk", q[q0:q1].float(), kk) * softmax_scale
        pos = torch.arange(kv_len - (q1 - q0), kv_len)[:, None]
        keys = torch.arange(kv_len)[None, :]
        ok = keys <= pos
        if window_size_left >= 0:
            ok &= keys >= pos - window_size_left
        s = s.masked_fill(~ok, float("-inf"))
        lse[:, q0:q1] = torch.logsumexp(s, -1)
        out[q0:q1] = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vv).to(out.dtype)
    return out, lse, None, None


@pytest.fixture
def emulated(monkeypatch):
    """The fa3 backend with the emulated op in place of the kernel (supports() is the real one elsewhere)."""
    monkeypatch.setattr(fa3, "upstream_op", lambda: emulated_fwd)
    monkeypatch.setattr(fa3, "load_kernel", lambda: fa3.Kernel("flash_attn_interface", "emulated", False))
    monkeypatch.setattr(fa3.FlashAttn3Backend, "supports", lambda self, device, model, dtype=None: None)
    return get_backend("fa3")


def _case():
    """docs/design.md §1's vector: C=4, seq_lens [19, 27], extend [11, 13] (prefix [8, 14])."""
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=2, head_dim=16, window=3)
    cell = build_cell(model, [11, 13], [8, 14], page_size=4, dtype=torch.float32, device=CPU, seed=3)
    return cell, all_ranks([11, 13], [8, 14], 4)


def test_call_arguments_match_the_zigzag_vectors_in_every_mode():
    cell, ranks = _case()
    work = rank_work(cell, ranks[0])
    t = cell.block_tables  # [2, W]
    two, fused, native = (fa3.mode_calls(work, m, t, duplicate_block_tables(t, "prev-next"))
                          for m in ("two-call", "fused", "cp-native"))
    assert [(c.name, c.cache_seqlens.tolist(), c.cu_seqlens_q.tolist(), c.max_seqlen_q, c.rows) for c in two] == [
        ("prev", [10, 16], [0, 2, 4], 2, (0, 4)), ("next", [19, 27], [0, 1, 2], 1, (4, 6))]
    assert all(c.page_table is t and c.cache_batch_idx is None for c in two)
    (f,), (n,) = fused, native
    for c in (f, n):  # cu_seqlens_q_combined / kv lengths of docs/design.md's rank 0
        assert (c.name, c.cache_seqlens.tolist(), c.cu_seqlens_q.tolist(), c.max_seqlen_q) == (
            "combined", [10, 16, 19, 27], [0, 2, 4, 5, 6], 2)
        assert c.cache_seqlens.dtype == c.cu_seqlens_q.dtype == torch.int32
    assert f.cache_batch_idx is None and torch.equal(f.page_table, torch.cat([t, t]))  # the duplicated [2*bs, W]
    assert n.page_table is t and n.cache_batch_idx.tolist() == [0, 1, 0, 1]  # [bs, W], nothing duplicated
    assert n.cache_batch_idx.dtype == torch.int32


def test_a_segment_that_would_read_the_wrong_row_is_refused():
    cell, ranks = _case()
    segs = rank_work(cell, ranks[1]).geometry.next_segments()  # table rows 0 and 1
    with pytest.raises(ValueError, match="segment 0 reads table row 1; .* gives it row 0"):
        fa3.segment_args([segs[1], segs[0]], cell.block_tables, native=False)  # [row 1, row 0]: wrong rows


@pytest.mark.parametrize("order", ["prev-next", "interleaved"])
def test_the_three_modes_equal_the_reference_on_every_rank(emulated, order):
    cell, ranks = _case()
    ref = get_backend("torch")
    for g in ranks:
        work = rank_work(cell, g, fused_order=order) if order != "prev-next" else rank_work(cell, g)
        p_ref = ref.prepare(work, "two-call")
        p_ref.forward()
        want = p_ref.local_outputs()
        got = {}
        for mode in ("two-call", "fused", "cp-native"):
            p = emulated.prepare(work, mode)
            assert p.columns == {"kernel_impl": "flash_attn_interface emulated"}
            assert p.calls_per_layer == (2 if mode == "two-call" else 1)
            p.forward()
            got[mode] = p.local_outputs()
            assert max_abs_error(work, p) < 1e-5, (g.rank, mode)
            for w in want:  # sinks folded in from the kernel's log-sum-exp
                assert torch.allclose(got[mode][w], want[w], atol=1e-5, rtol=0), (g.rank, mode, w)
        for w in want:
            assert torch.equal(got["fused"][w], got["cp-native"][w])


def test_the_timed_call_leaves_the_sinks_out_and_the_check_folds_them_in(emulated):
    cell, ranks = _case()
    work = rank_work(cell, ranks[2])
    p = emulated.prepare(work, "fused")
    p.forward()
    raw, folded = p.outputs, p.local_outputs()
    w = next(iter(raw))
    assert not torch.allclose(raw[w], folded[w])  # the buffers hold the kernel's output without sinks
    assert torch.equal(p.local_outputs()[w], folded[w])  # reading twice folds once


def test_fused_duplicates_the_table_and_cp_native_does_not(emulated):
    cell, ranks = _case()
    work = rank_work(cell, ranks[0])
    tables = {m: {id(c.page_table) for c in fa3.mode_calls(work, m, cell.block_tables,
                                                           duplicate_block_tables(cell.block_tables, "prev-next"))}
              for m in ("two-call", "cp-native")}
    assert tables["two-call"] == tables["cp-native"] == {id(cell.block_tables)}


def test_without_the_kernel_fa3_is_unsupported_with_how_to_get_it(monkeypatch):
    for name in ("sgl_kernel", "sgl_kernel.flash_attn", "flash_attn_interface"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails
    assert fa3.load_kernel() is None
    backend = fa3.FlashAttn3Backend()
    model = get_preset("gpt-oss-120b")
    on_cpu = backend.supports(CPU, model)  # cpbench doctor's line on a CPU: no GPU, and how to get the kernel
    assert "needs a CUDA GPU" in on_cpu and "hopper/" in on_cpu and "sgl-kernel" in on_cpu
    monkeypatch.setattr(fa3, "capability_refusal", lambda name, cc: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    reason = backend.supports(torch.device("cuda"), model)
    assert reason == fa3.INSTALL_HINT and "hopper/" in reason and "sgl-kernel" in reason


def test_sglangs_kernel_package_is_preferred_when_both_import(monkeypatch):
    import types

    pkg = types.ModuleType("sgl_kernel")
    pkg.flash_attn = types.ModuleType("sgl_kernel.flash_attn")
    monkeypatch.setitem(sys.modules, "sgl_kernel", pkg)
    monkeypatch.setitem(sys.modules, "sgl_kernel.flash_attn", pkg.flash_attn)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", types.ModuleType("flash_attn_interface"))
    k = fa3.load_kernel()
    assert (k.source, k.sinks_in_kernel) == ("sgl_kernel.flash_attn", True)
    monkeypatch.setitem(sys.modules, "sgl_kernel.flash_attn", None)
    k = fa3.load_kernel()
    assert (k.source, k.sinks_in_kernel) == ("flash_attn_interface", False)


def test_the_names_say_which_kernel():
    assert BACKENDS["fa3"].impl == "cpbench.kernels.backends.flash_attn3:FlashAttn3Backend"
    assert BACKENDS["flashinfer-fa3"].impl_args == ("fa3",) and BACKENDS["flashinfer-fa2"].impl_args == ("fa2",)
    assert get_backend("flashinfer-fa3").name == "flashinfer-fa3" and get_backend("fa3").name == "fa3"
    assert set(BACKENDS["fa3"].modes) == {"two-call", "fused", "cp-native"}  # declared (builtin.py), not on the class
    assert resolve_auto((9, 0)) == "trtllm-fmha-v2"  # auto keeps the kernel family PR #33137 fuses
