"""Zigzag geometry against the docs/design.md §1 vectors and properties."""

import pytest
from hypothesis import given, settings, strategies as st

from cpbench.domain.geometry import all_ranks, attended_pairs, attention_flops, block_sizes, rank_geometry
from cpbench.errors import CpbenchInputError

# docs/design.md §1: C=4, seq_lens [19,27], extend [11,13], prefix [8,14]
VECTORS = {
    0: ([2, 2], [1, 1], [10, 16], [19, 27]),
    1: ([2, 2], [1, 1], [12, 18], [18, 26]),
    2: ([2, 2], [1, 1], [14, 20], [17, 25]),
    3: ([1, 2], [1, 2], [15, 22], [16, 24]),
}


@pytest.mark.parametrize("rank", range(4))
def test_design_vectors(rank):
    g = rank_geometry([11, 13], [8, 14], 4, rank)
    q_prev, q_next, kv_prev, kv_next = VECTORS[rank]
    assert list(g.actual_seq_q_prev) == q_prev
    assert list(g.actual_seq_q_next) == q_next
    assert list(g.kv_len_prev) == kv_prev
    assert list(g.kv_len_next) == kv_next


def test_design_combined_rank0():
    g = rank_geometry([11, 13], [8, 14], 4, 0)
    assert g.cu_seqlens_q_combined == [0, 2, 4, 5, 6]
    assert g.cu_seqlens_kv_combined == [0, 10, 26, 45, 72]
    assert g.max_seqlen_q_combined == 2
    assert g.cu_seqlens_q_prev == [0, 2, 4] and g.cu_seqlens_q_next == [0, 1, 2]
    assert g.cu_seqlens_kv_prev == [0, 10, 26] and g.cu_seqlens_kv_next == [0, 19, 46]


def test_131072_tokens_cp4():
    for r, g in enumerate(all_ranks([131072], None, 4)):
        assert g.actual_seq_q_prev == (16384,) and g.actual_seq_q_next == (16384,)
        assert g.kv_len_prev == (16384 * (r + 1),)
        assert g.kv_len_next == (16384 * (8 - r),)


def test_4099_block_sizes():
    assert block_sizes(4099, 4) == [513, 513, 513, 512, 512, 512, 512, 512]


def test_ineligible_batch_has_reason():
    g = rank_geometry([7, 4096], None, 4, 0)
    assert not g.eligible
    assert "7" in g.reason and "8" in g.reason
    with pytest.raises(CpbenchInputError):
        g.calls("fused")
    assert g.to_json()["actual_seq_q_prev"] is None


def test_cp2_seven_tokens():
    gs = all_ranks([7], None, 2)
    assert all(g.eligible for g in gs)
    assert block_sizes(7, 2) == [2, 2, 2, 1]
    assert gs[0].actual_seq_q_prev == (2,) and gs[0].actual_seq_q_next == (1,)
    assert gs[1].actual_seq_q_prev == (2,) and gs[1].actual_seq_q_next == (2,)
    assert sum(g.tokens_logical for g in gs) == 7


def test_prefix_one_kept_in_every_kv_len():
    for g in all_ranks([3670], [1], 4):
        blk = block_sizes(3670, 4)
        r = g.rank
        assert g.kv_len_prev == (1 + sum(blk[:r + 1]),)
        assert g.kv_len_next == (1 + sum(blk[:8 - r]),)


def test_max_seqlen_is_max_not_sum():
    g = rank_geometry([10, 6, 8], None, 1, 0)  # cp 1: one segment per request
    assert g.max_seqlen_q_combined == 10
    g = rank_geometry([40, 24, 32], None, 4, 0)  # q_prev [5, 3, 4]
    assert list(g.actual_seq_q_prev) == [5, 3, 4]
    assert g.max_seqlen_q_prev == 5


def test_padding_to_multiple_of_2c():
    gs = all_ranks([11, 13], [8, 14], 4)
    assert [g.tokens_logical for g in gs] == [6, 6, 6, 6]
    assert {g.tokens_padded for g in gs} == {8}
    gs = all_ranks([4099], None, 4)
    assert max(g.tokens_logical for g in gs) == 1025 and gs[0].tokens_padded == 1032


def test_cp1_is_one_call():
    g = rank_geometry([5, 9], [2, 0], 1, 0)
    assert [n for n, _ in g.calls("fused")] == ["combined"]
    assert [n for n, _ in g.calls("two-call")] == ["combined"]
    assert g.kv_len_prev == (7, 9)


def test_calls_fused_reads_duplicated_rows():
    g = rank_geometry([11, 13], [8, 14], 4, 0)
    (name, segs), = g.calls("fused")
    assert name == "combined" and [s.table_row for s in segs] == [0, 1, 2, 3]
    assert [s.request for s in segs] == [0, 1, 0, 1]
    two = g.calls("two-call")
    assert [n for n, _ in two] == ["prev", "next"]
    assert [s.table_row for s in two[1][1]] == [0, 1]


@pytest.mark.parametrize("args", [
    ([4], None, 0, 0), ([4], None, 2, 2), ([], None, 2, 0), ([-3], None, 2, 0),
    ([8, 8], [1], 2, 0), ([8], [-1], 2, 0), ([0], None, 2, 0),
])
def test_bad_input(args):
    with pytest.raises(CpbenchInputError):
        rank_geometry(*args)


def test_attended_pairs():
    assert attended_pairs(4, 10) == 4 * 10 - 4 * 3 // 2
    assert attended_pairs(300, 300, 127) == sum(min(p, 127) + 1 for p in range(300))
    assert attended_pairs(5, 900, 127) == 5 * 128
    assert attended_pairs(0, 10) == 0


def test_flops_from_segments_not_max():
    g = rank_geometry([11, 13], [8, 14], 4, 0)
    (_, segs), = g.calls("fused")
    expect = sum(4 * 8 * 16 * (q * kv - q * (q - 1) // 2) for q, kv in zip([2, 2, 1, 1], [10, 16, 19, 27]))
    assert attention_flops(segs, 8, 16) == expect


batches = st.tuples(
    st.integers(1, 8),
    st.lists(st.integers(1, 3000), min_size=1, max_size=6),
).flatmap(lambda t: st.tuples(st.just(t[0]), st.lists(st.integers(2 * t[0], 3000), min_size=1,
                                                        max_size=6), st.integers(0, 50)))


@settings(max_examples=150, deadline=None)
@given(batches)
def test_properties(case):
    cp, ext, prefix = case
    pre = [prefix] * len(ext)
    gs = all_ranks(ext, pre, cp)
    assert sum(g.tokens_logical for g in gs) == sum(ext)
    for g in gs:
        assert g.actual_seq_q_combined == list(g.actual_seq_q_prev) + list(g.actual_seq_q_next)
        assert g.kv_len_combined == list(g.kv_len_prev) + list(g.kv_len_next)
        assert g.cu_seqlens_q_combined[-1] == g.tokens_logical
        assert g.tokens_padded >= g.tokens_logical
        assert cp == 1 or g.tokens_padded % (2 * cp) == 0
        for q, kv in zip(g.actual_seq_q_combined, g.kv_len_combined):
            assert 0 <= q <= kv


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(0, 30))
def test_balanced_causal_pairs_when_divisible(cp, mults, prefix):
    ext = [m * 2 * cp for m in mults]
    pairs = []
    for g in all_ranks(ext, [prefix] * len(ext), cp):
        pairs.append(sum(attended_pairs(q, kv) for q, kv in zip(g.actual_seq_q_combined, g.kv_len_combined)))
    assert len(set(pairs)) == 1
