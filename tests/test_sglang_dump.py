"""`cpbench geometry --check` on dumps spelled as SGLang writes them (examples/sglang_dump_cp4: one file per
rank, ZigzagContextParallelMetadata's list and tensor fields, the TRT-LLM backend's four page tables;
examples/sglang_dump_upstream_cp4: the same batch written by SGLang's own code)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import cpbench

DUMP = Path(__file__).resolve().parents[1] / "examples" / "sglang_dump_cp4"
UPSTREAM = DUMP.parent / "sglang_dump_upstream_cp4"
SCRIPT = DUMP.parents[1] / "scripts" / "sglang_dump_from_source.py"


def _rank(r: int) -> dict:
    return json.loads((DUMP / f"rank{r}.json").read_text())


def _write(tmp_path, d: dict, name="dump.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


def test_shipped_sglang_dump_directory_agrees():
    """Every rank file of the example: 34 compared fields each (pending_mla_kv_materializations is engine
    state: listed, not refused)."""
    r = cpbench("geometry", "--check", str(DUMP))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all 136 fields agree (cp_size 4, extend [11, 13], prefix [8, 14]; ranks 0, 1, 2, 3; rule pr" in r.stdout
    assert "not checked (engine state, not a function of the batch): pending_mla_kv_materializations" in r.stdout


def test_dump_written_by_sglang_code_agrees():
    """examples/sglang_dump_upstream_cp4 was written by SGLang 0.5.23's own build_metadata and padding
    (scripts/sglang_dump_from_source.py): 30 fields a rank, no page tables, nothing left unchecked."""
    r = cpbench("geometry", "--check", str(UPSTREAM))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == ("all 120 fields agree (cp_size 4, extend [11, 13], prefix [8, 14]; ranks 0, 1, 2, 3; "
                                "rule pr: every extend >= 2*cp_size)")


def test_dump_script_refuses_a_tree_without_sglang(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--sglang-src", str(tmp_path), "--out", str(tmp_path / "d")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "has no sglang/srt/layers/cp/zigzag.py" in r.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.skipif(not os.environ.get("CPBENCH_SGLANG_SRC"), reason="set CPBENCH_SGLANG_SRC to an SGLang source "
                    "tree (an unpacked sglang 0.5.23 wheel) to rebuild the upstream dump")
def test_dump_script_rebuilds_the_upstream_example(tmp_path):
    """With SGLang 0.5.23's source, the script writes the committed example byte for byte."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--sglang-src", os.environ["CPBENCH_SGLANG_SRC"],
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for rank in range(4):
        assert (tmp_path / f"rank{rank}.json").read_text() == (UPSTREAM / f"rank{rank}.json").read_text()


def test_one_rank_file_without_editing():
    r = cpbench("geometry", "--check", str(DUMP / "rank2.json"))
    assert r.returncode == 0 and "all 34 fields agree" in r.stdout and "ranks 2" in r.stdout


@pytest.mark.parametrize("field,value,expect", [
    ("cu_seqlens_kv_combined_tensor", [0, 10, 26, 45, 71], "engine [0, 10, 26, 45, 71], cpbench [0, 10, 26, 45, 72]"),
    ("kv_len_prev_list", [10, 17], "engine [10, 17], cpbench [10, 16]"),
    ("max_seqlen_q_next", 2, "engine 2, cpbench 1"),
    ("per_rank_actual_token", [6, 6, 6, 6], "engine [6, 6, 6, 6], cpbench [8, 8, 8, 8]"),
    ("zigzag_index", [0, 7, 8, 15], "engine [0, 7, 8, 15], cpbench [0, 8, 7, 15]"),
    ("zigzag_page_table", [[412], [412], [95], [95]], "engine [[412], [412], [95], [95]], cpbench [[412], [95], [412], [95]]"),
    ("zigzag_swa_page_table", [[412], [95], [412], [95]], "cpbench [[37], [12], [37], [12]]"),
    ("swa_page_table", [[37, 0], [12, 0]], "wrong shape: engine [2, 2], cpbench expects [2, 1] (page_table's"),
    ("zigzag_page_table", [[412], [95], [412]], "wrong shape: engine [3, 1], cpbench expects [4, 1] ([2*bs, W]"),
])
def test_first_difference_names_the_field_and_both_values(tmp_path, field, value, expect):
    d = _rank(0)
    d[field] = value
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"first difference: rank 0 {field}: " in r.stdout and expect in r.stdout
    assert f"{2 if field == 'swa_page_table' else 1} of 34 fields differ" in r.stdout


def test_unpadded_dump_compares_logical_rows(tmp_path):
    """A dump taken before pad_logical_token_to_physical (per_rank_logical_token null) holds the logical
    per-rank rows and their maximum."""
    d = _rank(1)
    d.update(per_rank_logical_token=None, per_rank_actual_token=[6, 6, 6, 6], max_rank_len=[6, 6, 6, 6])
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 0 and "all 34 fields agree" in r.stdout


def test_missing_prefix_is_one_line_exit_2(tmp_path):
    d = _rank(0)
    del d["extend_prefix_lens"], d["seq_lens"]
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "no prefix lengths, and cu_seqlens_kv_combined_tensor depends on them" in r.stderr
    ok = cpbench("geometry", "--check", str(_write(tmp_path, d)), "--prefix-lens", "8,14")
    assert ok.returncode == 0 and "all 34 fields agree" in ok.stdout


def test_prefix_from_seq_lens_alone(tmp_path):
    d = _rank(3)
    del d["extend_prefix_lens"]
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 0 and "prefix [8, 14]" in r.stdout


def test_prefix_and_seq_lens_that_disagree(tmp_path):
    d = _rank(0)
    d["seq_lens"] = [19, 28]
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 2 and "disagree with seq_lens - extend_seq_lens = [8, 15]" in r.stderr


def test_unknown_fields_are_listed_not_refused(tmp_path):
    d = _rank(0)
    d["some_future_field"] = [1, 2]
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 0 and "not checked (not a field cpbench knows): some_future_field" in r.stdout


def test_table_without_its_source_is_not_checked(tmp_path):
    d = _rank(0)
    del d["swa_page_table"]
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 0 and "all 32 fields agree" in r.stdout
    assert "not checked (its source table is not in the dump): swa_page_table" not in r.stdout
    assert "not checked (its source table is not in the dump): zigzag_swa_page_table" in r.stdout


@pytest.mark.parametrize("rows", [[[412], [95], [7]], [[412]]])
def test_wrong_shaped_page_table_is_a_wrong_shape(tmp_path, rows):
    """A page_table without one row per request is a difference that names the shape, and the tables derived
    from it say why they are not checked (not 'not in the dump')."""
    d = _rank(0)
    d["page_table"] = rows
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    n = len(rows)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"first difference: rank 0 page_table: wrong shape: engine {n} row{'' if n == 1 else 's'}, cpbench "
            "expects 2 (one per request: [bs, W])") in r.stdout
    assert (f"not checked (its source table page_table has a wrong shape: {n} row{'' if n == 1 else 's'}, "
            "expected bs = 2): swa_page_table, zigzag_page_table") in r.stdout
    assert "not in the dump" not in r.stdout and "1 of 32 fields differ" in r.stdout


def test_directory_of_two_batches_is_refused(tmp_path):
    a, b = _rank(0), _rank(1)
    b["extend_seq_lens"] = [11, 14]
    _write(tmp_path, a, "rank0.json")
    _write(tmp_path, b, "rank1.json")
    r = cpbench("geometry", "--check", str(tmp_path))
    assert r.returncode == 2 and "gives another batch" in r.stderr


def test_batch_too_short_for_cp_reads_as_eligibility(tmp_path):
    """SGLang built metadata for a batch cpbench's rule says runs without CP: the first difference says so."""
    d = {"cp_size": 4, "cp_rank": 0, "extend_seq_lens": [7, 13], "extend_prefix_lens": [0, 0],
         "actual_seq_q_prev_list": [1, 2]}
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 1
    assert "first difference: rank 0 eligible: engine true (it built CP metadata), cpbench false" in r.stdout


def test_a_rule_under_which_the_batch_runs_without_cp_is_one_difference_per_rank():
    """SGLang 0.5.23's example batch (extends 11, 13) runs with CP under PR #33137's rule only: checked under
    upstream's max(128, 2*cp_size) rule, each rank differs in one thing, eligibility, and the engine's
    metadata fields are listed as not checked rather than counted as differences."""
    r = cpbench("geometry", "--check", str(DUMP.parent / "sglang_dump_upstream_cp4"), "--cp-min-extend", "upstream")
    assert r.returncode == 1, r.stderr
    assert "first difference: rank 0 eligible: engine true (it built CP metadata), cpbench false" in r.stdout
    assert "4 of 4 fields differ" in r.stdout and "check with the rule the engine used" in r.stdout
