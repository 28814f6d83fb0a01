"""Paged KV cache, page tables and model presets."""

import json

import pytest
import torch

from cpbench.domain.geometry import rank_geometry
from cpbench.kernels.kv import (build_block_tables, duplicate_block_tables, last_page_len, paged_kv_arrays,
                                table_bytes, token_slots)
from cpbench.domain.hf_config import from_hf_config
from cpbench.domain.models import PRESETS, get_preset, with_overrides
from cpbench.errors import CpbenchInputError


def test_last_page_len():
    assert last_page_len(100, 16) == 4
    assert last_page_len(96, 16) == 16
    assert last_page_len(1, 64) == 1


def test_block_tables_shape_and_pages():
    bt, n = build_block_tables([100, 40], 16)
    assert bt.shape == (2, 7) and bt.dtype == torch.int32
    assert n == 7 + 3
    used = torch.cat([bt[0, :7], bt[1, :3]])
    assert sorted(used.tolist()) == list(range(10))  # every page used exactly once
    assert bt[1, 3:].tolist() == [0] * 4
    assert bt[0, :7].tolist() != list(range(7))  # seeded permutation, not a linear allocation


def test_context_len_sets_width():
    bt, _ = build_block_tables([100], 64, context_len=131072)
    assert bt.shape == (1, 2048)
    assert table_bytes(bt) == 2048 * 4
    assert table_bytes(duplicate_block_tables(bt)) == 2 * 2048 * 4
    with pytest.raises(CpbenchInputError):
        build_block_tables([100], 16, context_len=50)


def test_duplicated_table_rows():
    bt, _ = build_block_tables([19, 27], 4, seed=3)
    d = duplicate_block_tables(bt)
    assert d.shape == (4, bt.shape[1])
    assert torch.equal(d[:2], bt) and torch.equal(d[2:], bt)


def test_page_size_48_rejected():
    with pytest.raises(CpbenchInputError, match="48"):
        build_block_tables([100], 48)


def test_paged_kv_arrays_fused():
    g = rank_geometry([11, 13], [8, 14], 4, 0)
    bt, _ = build_block_tables([19, 27], 4)
    (_, segs), = g.calls("fused")
    indptr, indices, last = paged_kv_arrays(segs, duplicate_block_tables(bt), 4)
    assert indptr.tolist() == [0, 3, 7, 12, 19]  # ceil([10,16,19,27] / 4)
    assert last.tolist() == [2, 4, 3, 3]
    assert indices[:3].tolist() == bt[0, :3].tolist()
    assert indices[12:19].tolist() == bt[1, :7].tolist()


def test_token_slots():
    row = torch.tensor([5, 2, 9], dtype=torch.int32)
    assert token_slots(row, 6, 2).tolist() == [10, 11, 4, 5, 18, 19]


def test_presets():
    m = get_preset("gpt-oss-120b")
    assert (m.num_layers, m.num_q_heads, m.num_kv_heads, m.head_dim) == (36, 64, 8, 64)
    assert m.window_left_per_layer[:4] == (127, -1, 127, -1)
    assert m.has_sinks and m.page_size == 64 and m.sliding_window == 128
    assert get_preset("llama-3.1-8b").window_left_per_layer == (-1,) * 32
    assert set(PRESETS) == {"gpt-oss-120b", "gpt-oss-20b", "qwen3-30b-a3b", "llama-3.1-8b"}
    with pytest.raises(CpbenchInputError, match="unknown model"):
        get_preset("gpt-5")


def test_overrides():
    m = with_overrides(get_preset("llama-3.1-8b"), layers=4, window=128, sinks=True, page_size=16)
    assert m.window_left_per_layer == (127, -1, 127, -1) and m.has_sinks and m.page_size == 16
    m = with_overrides(get_preset("gpt-oss-120b"), window=0)
    assert set(m.window_left_per_layer) == {-1}
    with pytest.raises(CpbenchInputError):
        with_overrides(get_preset("llama-3.1-8b"), heads=30)  # not a multiple of 8 kv heads
    with pytest.raises(CpbenchInputError):
        with_overrides(get_preset("llama-3.1-8b"), page_size=48)


def test_hf_config(tmp_path):
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 2}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = from_hf_config(p)
    assert m.window_left_per_layer == (127, -1, 127, -1) and m.has_sinks
    llama = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "hidden_size": 4096, "sliding_window": None}
    p.write_text(json.dumps(llama))
    m = from_hf_config(tmp_path)  # a directory holding config.json works too
    assert m.head_dim == 128 and set(m.window_left_per_layer) == {-1} and not m.has_sinks


@pytest.mark.parametrize("text", ["{not json", "[]", json.dumps({"num_hidden_layers": 2})])
def test_hf_config_bad(tmp_path, text):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(CpbenchInputError):
        from_hf_config(p)
    with pytest.raises(CpbenchInputError, match="cannot read"):
        from_hf_config(tmp_path / "missing.json")


@pytest.mark.parametrize("cfg", [
    {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 100},  # head_dim would truncate
    {"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 16, "sliding_window": -5},
    {"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 16, "sliding_window": 8, "layer_types": ["x", "y"]},
])
def test_hf_config_rejects_silent_nonsense(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(CpbenchInputError):
        from_hf_config(p)


def test_hf_config_not_utf8(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xff\xfe{}")
    with pytest.raises(CpbenchInputError, match="UTF-8"):
        from_hf_config(p)
