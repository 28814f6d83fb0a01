"""cpbench's zigzag metadata against SGLang's published rules, restated here in our own words with vectors
worked by hand. Each test names the SGLang file and function whose behaviour it holds cpbench to."""

import json

from clirun import cpbench

from cpbench.domain.geometry import all_ranks, rank_geometry
from cpbench.domain.sglang_fields import batch_layout, expected_fields


def test_combined_fields_vector_every_rank():
    """python/sglang/srt/layers/cp/zigzag.py, ZigzagCPStrategy.build_metadata (PR #33137): the combined call
    lists every request's prev block, then every next block; its q and kv lengths are the prev list followed
    by the next list, cumulated from 0. C=4, seq_lens [19, 27], extend [11, 13] (prefix [8, 14])."""
    want = {  # rank: (actual_seq_q_combined, kv_len_combined, cu_seqlens_q_combined, cu_seqlens_kv_combined)
        0: ([2, 2, 1, 1], [10, 16, 19, 27], [0, 2, 4, 5, 6], [0, 10, 26, 45, 72]),
        1: ([2, 2, 1, 1], [12, 18, 18, 26], [0, 2, 4, 5, 6], [0, 12, 30, 48, 74]),
        2: ([2, 2, 1, 1], [14, 20, 17, 25], [0, 2, 4, 5, 6], [0, 14, 34, 51, 76]),
        3: ([1, 2, 1, 2], [15, 22, 16, 24], [0, 1, 3, 4, 6], [0, 15, 37, 53, 77]),
    }
    for g in all_ranks([11, 13], [8, 14], 4):
        f = expected_fields(g)
        q, kv, cu_q, cu_kv = want[g.rank]
        assert (f["actual_seq_q_combined"], f["kv_len_combined"]) == (q, kv)
        assert (f["cu_seqlens_q_combined"], f["cu_seqlens_kv_combined"]) == (cu_q, cu_kv)
        assert f["max_seqlen_q_combined"] == 2
        assert f["total_q_prev_tokens"] + f["total_q_next_tokens"] == cu_q[-1] == 6


def test_two_call_fields_vector_rank0():
    """zigzag.py, build_metadata: per-half cumulative lengths and max lengths (the two calls' arguments)."""
    f = expected_fields(rank_geometry([11, 13], [8, 14], 4, 0))
    assert f["cu_seqlens_q_prev"] == [0, 2, 4] and f["cu_seqlens_q_next"] == [0, 1, 2]
    assert f["cu_seqlens_kv_prev"] == [0, 10, 26] and f["cu_seqlens_kv_next"] == [0, 19, 46]
    assert (f["max_seqlen_q_prev"], f["max_seqlen_q_next"]) == (2, 1)
    assert (f["total_q_prev_tokens"], f["total_q_next_tokens"]) == (4, 2)


def test_layout_lists_one_request_cp2():
    """zigzag.py, build_metadata: 10 tokens at C=2 are blocks [3, 3, 2, 2]; rank 0 owns blocks 0 and 3, rank 1
    blocks 1 and 2 (zigzag_index); the all-gather returns rank 0's pair then rank 1's, so
    reverse_split_len is [3, 2, 3, 2] and cp_reverse_index [0, 2, 3, 1] puts blocks 0..3 back in order."""
    lay = batch_layout([10], 2)
    assert lay["split_list"] == [3, 3, 2, 2]
    assert lay["reverse_split_len"] == [3, 2, 3, 2] and lay["cp_reverse_index"] == [0, 2, 3, 1]
    assert expected_fields(rank_geometry([10], [0], 2, 0))["zigzag_index"] == [0, 3]
    assert expected_fields(rank_geometry([10], [0], 2, 1))["zigzag_index"] == [1, 2]
    assert lay["per_rank_logical_token"] == [5, 5] and lay["total_seq_lens"] == 10


def test_layout_round_trip_two_requests():
    """zigzag.py, shard_hidden_states then gather_hidden_states: splitting by split_list and taking
    zigzag_index gives each rank's rows; gathering rank-major, splitting by reverse_split_len and taking
    cp_reverse_index restores token order."""
    ext, cp = [11, 13], 4
    lay = batch_layout(ext, cp)
    tokens = list(range(sum(ext)))
    chunks, at = [], 0
    for n in lay["split_list"]:
        chunks.append(tokens[at:at + n])
        at += n
    gathered = [t for r in range(cp)
                for i in expected_fields(rank_geometry(ext, [0, 0], cp, r))["zigzag_index"] for t in chunks[i]]
    back, at = [], 0
    for n in lay["reverse_split_len"]:
        back.append(gathered[at:at + n])
        at += n
    assert [t for i in lay["cp_reverse_index"] for t in back[i]] == tokens


def test_padded_rows():
    """python/sglang/srt/layers/cp/padding.py, pad_logical_token_to_physical: every rank's rows are padded to
    ceil(max_r rows_r / 2C) * 2C; per_rank_logical_token keeps the real counts."""
    f = expected_fields(rank_geometry([11, 13], [8, 14], 4, 2))
    assert f["per_rank_logical_token"] == [6, 6, 6, 6]
    assert f["per_rank_actual_token"] == f["max_rank_len"] == [8, 8, 8, 8] and f["tokens_padded"] == 8
    f = expected_fields(rank_geometry([4099], [0], 4, 0))
    assert f["per_rank_logical_token"] == [1025, 1025, 1025, 1024] and f["tokens_padded"] == 1032
    unpadded = expected_fields(rank_geometry([4099], [0], 4, 0), padded=False)
    assert unpadded["per_rank_actual_token"] == [1025, 1025, 1025, 1024]
    assert unpadded["max_rank_len"] == [1025] * 4 and unpadded["per_rank_logical_token"] is None


def test_padded_last_request(tmp_path):
    """zigzag.py, build_metadata: given more rows (num_tokens) than the extend total, SGLang adds the difference
    to the last request's extend (and seq) length; its prefix stays. Extend [9, 4], seq_lens [12, 4],
    num_tokens 15 at C=2: the last request splits as 6 tokens, blocks [2, 2, 1, 1] (the first [3, 2, 2, 2]);
    rank 0: q_prev [3, 2], q_next [2, 1], kv_prev [3+3, 0+2], kv_next [3+9, 0+6]."""
    g = rank_geometry([9, 6], [3, 0], 2, 0)
    f = expected_fields(g)
    assert (f["actual_seq_q_prev"], f["actual_seq_q_next"]) == ([3, 2], [2, 1])
    assert (f["kv_len_prev"], f["kv_len_next"]) == ([6, 2], [12, 6]) and f["total_seq_lens"] == 15
    dump = {"cp_size": 2, "cp_rank": 0, "extend_seq_lens": [9, 4], "seq_lens": [12, 4], "num_tokens": 15,
            "actual_seq_q_prev_list": [3, 2], "kv_len_next_list": [12, 6], "cu_seqlens_kv_combined_tensor":
            [0, 6, 8, 20, 26], "split_list": [3, 2, 2, 2, 2, 2, 1, 1], "total_seq_lens": 15}
    p = tmp_path / "padded.json"
    p.write_text(json.dumps(dump))
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all 5 fields agree (cp_size 2, extend [9, 6] (the last padded by 2 of num_tokens), prefix [3, 0]" in r.stdout
    p.write_text(json.dumps({**dump, "num_tokens": 13}))  # the rows SGLang split without padding: differs
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 1 and "first difference: rank 0 actual_seq_q_prev_list: engine [3, 2], cpbench [3, 1]" in r.stdout
    assert "5 of 5 fields differ (cp_size 2, extend [9, 4], prefix [3, 0]" in r.stdout


def test_prefix_from_seq_lens_is_clamped_at_zero(tmp_path):
    """zigzag.py, build_metadata: prefix_offsets = max(seq_len - extend_len, 0)."""
    dump = {"cp_size": 2, "cp_rank": 1, "extend_seq_lens": [8], "seq_lens": [5], "kv_len_prev_list": [4]}
    p = tmp_path / "d.json"
    p.write_text(json.dumps(dump))
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 0 and "prefix [0]" in r.stdout and "all 1 fields agree" in r.stdout
