"""The TRT-LLM argument set (one builder for trtllm-gen and trtllm-fmha-v2) against hand-computed vectors,
and the FMHAv2 call as the backend makes it (flashinfer's function patched: no GPU needed)."""

import sys
import types

import pytest
import torch

from cpbench.kernels.backends import get_backend
from cpbench.kernels.backends.trtllm_args import call_tensors, layer_args, trtllm_calls
from cpbench.domain.geometry import rank_geometry
from cpbench.kernels.kv import allocate_kv_cache, duplicate_block_tables, kv_block_offsets
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.errors import CpbenchInputError

# docs/design.md §1: C=4, seq_lens [19, 27], extend [11, 13], prefix [8, 14]
EXT, PRE = [11, 13], [8, 14]


def test_fused_call_of_rank0_matches_the_design_vector():
    (c,) = trtllm_calls(rank_geometry(EXT, PRE, 4, 0), "fused", context_len=64)
    assert c.name == "combined" and c.batch_size == 4
    assert c.seq_lens == (10, 16, 19, 27)
    assert c.cum_seq_lens_q == (0, 2, 4, 5, 6) and c.cum_seq_lens_kv == (0, 10, 26, 45, 72)
    assert c.max_q_len == 2 and c.max_kv_len == 64
    assert c.table_rows == (0, 1, 2, 3) and c.q_rows == (0, 6)


@pytest.mark.parametrize("rank,q_prev,q_next,kv_prev,kv_next", [
    (0, [2, 2], [1, 1], [10, 16], [19, 27]), (1, [2, 2], [1, 1], [12, 18], [18, 26]),
    (2, [2, 2], [1, 1], [14, 20], [17, 25]), (3, [1, 2], [1, 2], [15, 22], [16, 24])])
def test_two_call_arguments_per_rank(rank, q_prev, q_next, kv_prev, kv_next):
    prev, nxt = trtllm_calls(rank_geometry(EXT, PRE, 4, rank), "two-call", context_len=27)
    assert (prev.name, nxt.name) == ("prev", "next")
    assert prev.seq_lens == tuple(kv_prev) and nxt.seq_lens == tuple(kv_next)
    assert prev.cum_seq_lens_q == (0, q_prev[0], sum(q_prev)) and nxt.cum_seq_lens_q == (0, q_next[0], sum(q_next))
    assert prev.cum_seq_lens_kv == (0, kv_prev[0], sum(kv_prev))
    assert prev.max_q_len == max(q_prev) and nxt.max_q_len == max(q_next)
    assert prev.table_rows == nxt.table_rows == (0, 1)  # both halves read the plain [bs, W] table
    assert prev.q_rows == (0, sum(q_prev)) and nxt.q_rows == (sum(q_prev), sum(q_prev) + sum(q_next))


def test_other_fused_orders_and_no_cp():
    (c,) = trtllm_calls(rank_geometry(EXT, PRE, 4, 0), "fused", 64, "next-prev")
    assert c.seq_lens == (19, 27, 10, 16) and c.cum_seq_lens_q == (0, 1, 2, 4, 6) and c.table_rows == (0, 1, 2, 3)
    (c,) = trtllm_calls(rank_geometry(EXT, PRE, 4, 0), "fused", 64, "interleaved")
    assert c.seq_lens == (10, 19, 16, 27)
    (c,) = trtllm_calls(rank_geometry(EXT, PRE, 1, 0), "two-call", 27)  # cp_size 1: one call over bs segments
    assert c.name == "combined" and c.seq_lens == (19, 27) and c.cum_seq_lens_q == (0, 11, 24)
    with pytest.raises(CpbenchInputError, match="not CP-eligible"):
        trtllm_calls(rank_geometry([7], [0], 4, 0), "fused", 64)


def test_mask_mode_per_layer_kind():
    assert layer_args(127, 64) == dict(window_left=127, mask_mode="sliding_window", bmm1_scale=0.125, bmm2_scale=1.0)
    assert layer_args(-1, 128) == dict(window_left=-1, mask_mode="causal", bmm1_scale=128 ** -0.5, bmm2_scale=1.0)


def test_call_tensors_read_the_duplicated_table():
    table = torch.arange(10, dtype=torch.int32).reshape(2, 5)  # [bs, W]
    (c,) = trtllm_calls(rank_geometry(EXT, PRE, 4, 0), "fused", 40)
    t = call_tensors(c, duplicate_block_tables(table))
    assert torch.equal(t["block_tables"], torch.cat([table, table])) and t["block_tables"].dtype == torch.int32
    assert t["seq_lens"].tolist() == [10, 16, 19, 27] and t["seq_lens"].dtype == torch.int32
    assert t["cum_seq_lens_kv"].tolist() == [0, 10, 26, 45, 72] and t["batch_size"] == 4


def test_kv_block_offsets_address_k_and_v_of_one_allocation():
    k, v = allocate_kv_cache(6, 4, 2, 8, torch.bfloat16, "cpu", seed=1)
    assert k.is_contiguous() and v.is_contiguous()
    block = k[0].numel() * k.element_size()
    assert v.data_ptr() - k.data_ptr() == 6 * block  # V starts num_pages blocks after K
    table = torch.tensor([[3, 1], [0, 5]], dtype=torch.int32)
    off = kv_block_offsets(table, 6)  # [rows, 2, W]
    assert off.shape == (2, 2, 2) and off.dtype == torch.int32
    assert off[:, 0].tolist() == [[3, 1], [0, 5]] and off[:, 1].tolist() == [[9, 7], [6, 11]]
    n = k[0].numel()
    flat = torch.as_strided(k, (12, n), (n, 1))  # the one allocation, block by block, from K's base pointer
    assert torch.equal(flat[int(off[0, 1, 0])], v[3].reshape(-1)) and torch.equal(flat[int(off[1, 0, 1])], k[5].reshape(-1))


def _calls(monkeypatch, backend, mode, swa_pool=False):
    """Prepare and run one forward of ``backend`` (2 layers: window, full) with flashinfer's TRT-LLM function
    replaced by a recorder; returns (the recorded keyword arguments per call, the cell, the forward)."""
    seen = []
    fake = types.ModuleType("flashinfer.prefill")
    fake.trtllm_fmha_v2_prefill = fake.trtllm_batch_context_with_kv_cache = lambda **kw: seen.append(kw)
    pkg = types.ModuleType("flashinfer")
    pkg.prefill = fake
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.prefill", fake)
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=16, page_size=4)
    cell = build_cell(model, EXT, PRE, page_size=4, dtype=torch.bfloat16, device="cpu", context_len=64,
                      swa_pool=swa_pool)
    prep = get_backend(backend).prepare(rank_work(cell, rank_geometry(EXT, PRE, 4, 0)), mode)
    prep.forward()
    return seen, cell, prep


def test_fmha_v2_fused_call_as_the_pr_makes_it(monkeypatch):
    seen, cell, prep = _calls(monkeypatch, "trtllm-fmha-v2", "fused")
    assert len(seen) == 2 and prep.calls_per_layer == 1  # 2 layers x 1 call
    kw = seen[0]
    assert kw["input_layout"] == "Q_PAGED_KV_NHD" and kw["batch_size"] == 4
    dup = torch.cat([cell.block_tables, cell.block_tables])  # the PR's cat(t, t)
    assert torch.equal(kw["block_tables"], torch.stack([dup, dup + cell.num_pages], dim=1))  # [2*bs, 2, W]
    assert kw["seq_lens"].tolist() == [10, 16, 19, 27] and kw["cum_seq_lens_q"].tolist() == [0, 2, 4, 5, 6]
    assert kw["cum_seq_lens_kv"].tolist() == [0, 10, 26, 45, 72] and kw["max_q_len"] == 2 and kw["max_kv_len"] == 64
    assert kw["bmm1_scale"] == 16 ** -0.5 and kw["bmm2_scale"] == 1.0
    assert [(c["mask_mode"], c["window_left"]) for c in seen] == [("sliding_window", 127), ("causal", -1)]
    q, (k, v) = kw["qkv"]
    assert q.shape == (6, 8, 16) and k.shape == (cell.num_pages, 4, 2, 16) and v.data_ptr() > k.data_ptr()
    assert kw["sinks"].dtype == torch.float32 and kw["sinks"].shape == (8,)
    assert kw["out"].shape == q.shape and kw["workspace_buffer"].numel() == 512 << 20
    assert not kw["workspace_buffer"].any()  # zeroed, as SGLang allocates it


def test_fmha_v2_two_call_uses_the_plain_table(monkeypatch):
    seen, cell, prep = _calls(monkeypatch, "trtllm-fmha-v2", "two-call")
    assert len(seen) == 4 and prep.calls_per_layer == 2
    prev, nxt = seen[0], seen[1]
    plain = torch.stack([cell.block_tables, cell.block_tables + cell.num_pages], dim=1)
    assert torch.equal(prev["block_tables"], plain) and torch.equal(nxt["block_tables"], plain)
    assert prev["seq_lens"].tolist() == [10, 16] and nxt["seq_lens"].tolist() == [19, 27]
    assert prev["qkv"][0].shape[0] == 4 and nxt["qkv"][0].shape[0] == 2  # q rows: prev blocks, then next blocks
    assert prev["out"].data_ptr() != nxt["out"].data_ptr()


def test_trtllm_gen_fused_arguments(monkeypatch):
    seen, cell, _ = _calls(monkeypatch, "trtllm-gen", "fused")
    assert len(seen) == 2  # 2 layers x 1 call
    kw = seen[0]
    assert kw["batch_size"] == 4
    assert torch.equal(kw["block_tables"], torch.cat([cell.block_tables, cell.block_tables]))
    assert kw["seq_lens"].tolist() == [10, 16, 19, 27]
    assert kw["cum_seq_lens_q"].tolist() == [0, 2, 4, 5, 6]
    assert kw["cum_seq_lens_kv"].tolist() == [0, 10, 26, 45, 72]
    assert kw["max_q_len"] == 2 and kw["max_kv_len"] == 64
    assert kw["bmm1_scale"] == 16 ** -0.5 and kw["bmm2_scale"] == 1.0
    assert [c["window_left"] for c in seen] == [127, -1]
    assert kw["kv_cache"][0].shape == (cell.num_pages, 2, 4, 16)  # HND view
    assert kw["sinks"][0].dtype == torch.float32 and kw["out"].shape == kw["query"].shape
    assert kw["kv_layout"] == "HND"


def test_trtllm_gen_two_call_arguments(monkeypatch):
    seen, cell, _ = _calls(monkeypatch, "trtllm-gen", "two-call")
    assert len(seen) == 4  # 2 layers x (prev, next)
    prev, nxt = seen[0], seen[1]
    assert prev["batch_size"] == nxt["batch_size"] == 2
    assert torch.equal(prev["block_tables"], cell.block_tables) and torch.equal(nxt["block_tables"], cell.block_tables)
    assert prev["seq_lens"].tolist() == [10, 16] and nxt["seq_lens"].tolist() == [19, 27]
    assert prev["cum_seq_lens_q"].tolist() == [0, 2, 4] and nxt["cum_seq_lens_kv"].tolist() == [0, 19, 46]


@pytest.mark.parametrize("mode", ["fused", "two-call"])
def test_fmha_v2_window_layers_read_the_swa_pool(monkeypatch, mode):
    """--swa-pool (SGLang: swa_page_table / zigzag_swa_page_table): the window layer passes the SWA pool's
    table, [2*bs, W] cat(t, t) for fused, as K/V block offsets into the SWA pool's one allocation, and that
    pool's caches; the full layer passes the full pool's."""
    seen, cell, prep = _calls(monkeypatch, "trtllm-fmha-v2", mode, swa_pool=True)
    dup = (lambda t: torch.cat([t, t])) if mode == "fused" else (lambda t: t)
    offsets = lambda t: torch.stack([dup(t), dup(t) + cell.num_pages], dim=1)  # noqa: E731
    window = [c for c in seen if c["window_left"] == 127]
    full = [c for c in seen if c["window_left"] == -1]
    assert len(window) == len(full) == prep.calls_per_layer
    swa_k, swa_v = cell.swa_kv_buffers[0]
    for c in window:
        assert torch.equal(c["block_tables"], offsets(cell.swa_block_tables))
        assert [t.data_ptr() for t in c["qkv"][1]] == [swa_k.data_ptr(), swa_v.data_ptr()]
        assert swa_v.data_ptr() - swa_k.data_ptr() == swa_k.numel() * swa_k.element_size()  # one allocation
    for c in full:
        assert torch.equal(c["block_tables"], offsets(cell.block_tables))
        assert c["qkv"][1][0].data_ptr() == cell.kv_buffers[0][0].data_ptr()
    assert "swa_page_table" in prep.setup_us


def test_trtllm_gen_fused_window_layer_reads_the_duplicated_swa_table(monkeypatch):
    seen, cell, _ = _calls(monkeypatch, "trtllm-gen", "fused", swa_pool=True)
    window, full = seen  # layer 0 (window 127), layer 1 (full)
    swa = cell.swa_block_tables
    assert window["window_left"] == 127 and torch.equal(window["block_tables"], torch.cat([swa, swa]))
    assert window["block_tables"].shape == (4, swa.shape[1]) and window["block_tables"].dtype == torch.int32
    k, v = cell.swa_kv_buffers[0]
    assert window["kv_cache"][0].data_ptr() == k.data_ptr() and window["kv_cache"][1].data_ptr() == v.data_ptr()
    assert torch.equal(full["block_tables"], torch.cat([cell.block_tables, cell.block_tables]))
    assert full["kv_cache"][0].data_ptr() == cell.kv_buffers[0][0].data_ptr()


def test_fmha_v2_refused_on_cpu_in_one_line(tmp_path):
    from clirun import cpbench

    r = cpbench("sweep", "--backend", "trtllm-fmha-v2", "--cp", "2", "--bs", "1", "--layers", "1",
                "--out", str(tmp_path / "r"), "--device", "cpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "trtllm-fmha-v2" in r.stderr and "--backend torch" in r.stderr and len(r.stderr.strip().splitlines()) == 1
