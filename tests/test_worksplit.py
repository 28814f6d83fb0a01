"""Work split arithmetic against hand-computed cases (tiles, KV chunks, CTAs, waves, planner loads)."""

import pytest

from cpbench.domain.worksplit import fa2_cta_tile_q, fused_segments, kv_tiles, split_launch, split_rank, tile_config
from cpbench.errors import CpbenchInputError

GPT_OSS = dict(num_q_heads=64, num_kv_heads=8, head_dim=64)


def test_kv_tiles_causal_window_chunk():
    # q 256, kv 2048: rows [0, 128) sit at positions 1792..1919 and need keys [0, 1920)
    assert kv_tiles(256, 2048, (0, 128), 96) == 20  # ceil(1920 / 96)
    # window_left 127: keys [1792 - 127, 1920) = [1665, 1920): tiles 17 (1632..) to 19 -> 3
    assert kv_tiles(256, 2048, (0, 128), 96, window_left=127) == 3
    # q 256, kv 256: rows [0, 16) need keys [0, 16): one tile of 64; none of the chunk [128, 256)
    assert kv_tiles(256, 256, (0, 16), 64, keys=(0, 128)) == 1
    assert kv_tiles(256, 256, (0, 16), 64, keys=(128, 256)) == 0


def test_fa2_cta_tile_q_thresholds():
    assert [fa2_cta_tile_q(n, 64) for n in (2048, 65, 64, 17, 16, 1)] == [128, 128, 64, 64, 16, 16]
    assert fa2_cta_tile_q(2048, 256) == 64  # head_dim 256 never takes 128 rows


def test_tile_config_defaults_and_refusal():
    fa3 = tile_config("fa3", 64, [256], 8)
    assert (fa3.cta_tile_q, fa3.cta_tile_kv, fa3.persistent, fa3.ctas_per_sm) == (192, 96, True, 1)
    assert (tile_config("fa3", 128, [256], 8).cta_tile_q, tile_config("fa3", 256, [9], 8).cta_tile_kv) == (128, 32)
    fa2 = tile_config("fa2", 64, [2, 2], 8)  # average packed length 16 -> 16 rows
    assert (fa2.cta_tile_q, fa2.packed_gqa, fa2.ctas_per_sm) == (16, True, 2)
    with pytest.raises(CpbenchInputError, match="fa2 and fa3"):
        tile_config("torch", 64, [1], 1)


def test_the_work_split_models_flashinfers_templates_by_backend_name():
    """cpbench's flashinfer-fa2 / flashinfer-fa3 map to FlashInfer's fa2 / fa3 templates (tile_config's names);
    a backend name is refused there, FlashAttention-3's fa3 has no model, and explain maps the name it runs."""
    from cpbench.domain.worksplit import TEMPLATES
    from cpbench.studies.explain.measure import WORK_SPLIT

    assert TEMPLATES == {"flashinfer-fa2": "fa2", "flashinfer-fa3": "fa3"} and WORK_SPLIT == TEMPLATES
    assert tile_config(TEMPLATES["flashinfer-fa3"], 64, [256], 8).persistent
    assert "fa3" not in WORK_SPLIT  # FlashAttention-3: ncu's figures only
    with pytest.raises(CpbenchInputError, match="cpbench's flashinfer-fa2 and flashinfer-fa3"):
        tile_config("flashinfer-fa3", 64, [256], 8)


def test_fa2_split_kv_gpt_oss_cp4_rank0_full_layer():
    # cp 4, bs 1, 2048 tokens, rank 0: prev (256, 256), next (256, 2048). Packed rows 256 * 8 = 2048 ->
    # tile 128 -> 16 q tiles. max_batch_size_if_split = 2 * 132 / 8 = 33.
    # prev: 4 pages; chunk >= 2 pages; 16 * ceil(4 / 2) = 32 <= 33 -> chunk 2 pages = 128 tokens, split
    # next: 32 pages; 16 * ceil(32 / 16) = 32 <= 33, 16 * ceil(32 / 15) = 48 > 33 -> chunk 16 pages = 1024
    # fused: 16 * ceil(4 / c) + 16 * ceil(32 / c) <= 33 only for c = 32 = the longest -> no split
    s = split_rank([256], [256], [256], [2048], backend="fa2", **GPT_OSS)
    assert (s["prev"].split_kv, s["prev"].kv_chunk) == (True, 128)
    assert (s["next"].split_kv, s["next"].kv_chunk) == (True, 1024)
    assert (s["fused"].split_kv, s["fused"].kv_chunk) == (False, 2048)
    for name in ("prev", "next", "fused"):  # 16 x 2 x 8, 16 x 2 x 8, (16 + 16) x 1 x 8
        assert s[name].ctas == 256 and s[name].slots == 264
        assert s[name].waves == pytest.approx(256 / 264, abs=1e-4) and s[name].full_waves == 1
    assert [x.q_tiles for x in s["fused"].segments] == [16, 16]
    assert [x.kv_chunks for x in s["prev"].segments] == [2]
    # prev, packed tile t covers q rows [16t, 16t + 16): keys [0, 16t + 16) -> ceil((16t + 16) / 64)
    assert s["prev"].segments[0].kv_tiles_per_q_tile == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4


def test_fa3_gpt_oss_cp4_rank0_tiles():
    # fa3, head_dim 64: tile 192 x 96. next (256, 2048): tile 0 rows [0, 192) need keys [0, 1984) -> 21
    # tiles; tile 1 rows [192, 256) need [0, 2048) -> 22. prev (256, 256): [0, 192) -> 2, [0, 256) -> 3.
    s = split_rank([256], [256], [256], [2048], backend="fa3", **GPT_OSS)
    assert s["next"].segments[0].kv_tiles_per_q_tile == [21, 22]
    assert s["prev"].segments[0].kv_tiles_per_q_tile == [2, 3]
    assert s["prev"].ctas == 128 and s["fused"].ctas == 256  # 2 q tiles x 64 heads per segment
    assert s["fused"].full_waves == 2 and s["fused"].tail_fill == pytest.approx(124 / 132, abs=1e-4)
    assert s["fused"].tile_work == 64 * (2 + 3 + 21 + 22)


def test_fa3_planner_loads_hand_computed():
    # 2 SMs, 1 head, tiles 128 x 128: next (256, 1024) first (longest kv): tile 1 costs 256 + 1024 -> SM 0,
    # tile 0 costs 256 + 896 -> SM 1; prev (256, 256) tile 1 (256 + 256) -> SM 1 (1152 < 1280), tile 0
    # (256 + 128) -> SM 0. KV tiles: next 8 and 7, prev 2 and 1: SM 0 = 8 + 1, SM 1 = 7 + 2.
    kw = dict(backend="fa3", num_q_heads=1, num_kv_heads=1, head_dim=128, num_sms=2, cta_tile_q=128, cta_tile_kv=128)
    one = split_launch("fused", [256, 256], [256, 1024], **kw)
    assert (one.makespan_tiles, one.tile_work, one.ctas, one.waves) == (9, 18, 4, 2.0)
    # with 2 heads the second head repeats: SM 0 = 9 + 8 + 1 = 18, SM 1 = 9 + 7 + 2 = 18
    two = split_launch("fused", [256, 256], [256, 1024], **{**kw, "num_q_heads": 2, "num_kv_heads": 2})
    assert (two.makespan_tiles, two.mean_tiles) == (18, 18.0)


def test_fa2_list_schedule_and_tail():
    # 3 segments (16, 16), 1 head, packed tile 16 -> 1 CTA each of 1 KV tile; 1 SM x 2 slots:
    # 3 CTAs on 2 slots = 1.5 waves, second wave half full, busiest slot 2 tiles
    s = split_launch("x", [16, 16, 16], [16, 16, 16], backend="fa2", num_q_heads=1, num_kv_heads=1, head_dim=64,
                     num_sms=1, page_size=16)
    assert (s.ctas, s.slots, s.waves, s.full_waves, s.tail_fill, s.makespan_tiles) == (3, 2, 1.5, 2, 0.5, 2)


def test_fused_orders_and_bad_input():
    assert fused_segments([2, 2], [10, 16], [1, 1], [19, 27], "interleaved") == \
        ([2, 1, 2, 1], [10, 19, 16, 27], ["prev[0]", "next[0]", "prev[1]", "next[1]"])
    assert fused_segments([2], [10], [1], [19], "next-prev")[:2] == ([1, 2], [19, 10])
    with pytest.raises(CpbenchInputError, match="unknown --fused-order"):
        fused_segments([1], [1], [1], [1], "x")
    with pytest.raises(CpbenchInputError, match="kv_len >= q_len"):
        split_launch("x", [5], [4], backend="fa3", num_q_heads=1, num_kv_heads=1, head_dim=64)


def test_cta_cost_heap_breaks_ties_as_libstdcxx():
    # FlashInfer's CTACostHeap over std::pop_heap / std::push_heap: the CTAs popped for these cost increments,
    # as a 5-line C++ program with libstdc++ prints them (equal costs are common: every CTA starts at 0)
    from cpbench.domain.worksplit_plans import CtaCostHeap

    h, popped = CtaCostHeap(5), []
    for inc in [3, 1, 2, 2, 1, 3, 1, 1, 2, 3, 2, 1, 1, 1, 2, 2, 3, 1]:
        cta, cost = h.pop()
        popped.append(cta)
        h.insert((cta, cost + inc))
    assert popped == [0, 2, 4, 1, 3, 2, 3, 1, 4, 3, 0, 1, 4, 2, 1, 0, 2, 3]
