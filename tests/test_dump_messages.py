"""`cpbench geometry --check` messages: a long batch is shortened ("… (N more)"), a batch length out of range
is one line naming the field and the request, and a null field is compared the same whether it is a list or
a page table."""

import json
import re
from pathlib import Path

import pytest

from cpbench.errors import CpbenchInputError
from cpbench.domain.geometry_check import diff_dump, load_dump, resolve_batch, shown
from clirun import cpbench

DUMP = Path(__file__).resolve().parents[1] / "examples" / "sglang_dump_cp4"


def _write(tmp_path, d: dict) -> Path:
    p = tmp_path / "dump.json"
    p.write_text(json.dumps(d))
    return p


def _first_difference(tmp_path, d: dict) -> tuple[list[str], dict]:
    dump = load_dump(_write(tmp_path, d))
    res = diff_dump(dump, resolve_batch(dump, None, None, None))
    return res.differences, res.not_checked


def test_shown_keeps_short_lists_whole():
    assert shown([11, 13]) == "[11, 13]"
    assert shown(range(20), keep=3) == "[0, 1, 2, … (17 more)]"


def test_a_batch_of_thousands_of_requests_is_one_short_line(tmp_path):
    n = 5000
    d = {"cp_size": 4, "cp_rank": 0, "extend_seq_lens": [16] * n, "extend_prefix_lens": [0] * n,
         "actual_seq_q_prev_list": [2] * 4000 + [3] + [2] * (n - 4001), "max_seqlen_q_prev": 3}
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert len(r.stdout) < 1000 and all(len(x) < 400 for x in lines), r.stdout[:2000]
    assert ("extend [16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, … (4984 more)], "
            "prefix [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, … (4984 more)]; ranks 0;") in lines[-1]
    assert lines[0].endswith("(first at item 4000: engine 3, cpbench 2)")
    assert "2 of 2 fields differ" in lines[-1]


@pytest.mark.parametrize("key,values,needle", [
    ("extend_seq_lens", [11, -13], "extend_seq_lens [11, -13] holds a negative extend length (-13, request 1): "
                                   "extend lengths must be in [1, 2147483647] tokens"),
    ("extend_seq_lens", [0, 13], "extend_seq_lens [0, 13] holds an extend length of 0 (request 0): "
                                 "extend lengths must be in [1, 2147483647] tokens"),
    ("extend_seq_lens", [11, 10**15], "extend_seq_lens [11, 1000000000000000] holds an extend length above "
                                      "2147483647 (1000000000000000, request 1)"),
    ("extend_prefix_lens", [8, 2**31], "extend_prefix_lens [8, 2147483648] holds a prefix length above 2147483647 "
                                       "(2147483648, request 1): prefix lengths must be in [0, 2147483647] tokens"),
    ("seq_lens", [19, -1], "seq_lens [19, -1] holds a negative sequence length (-1, request 1)"),
    ("num_tokens", 10**15, "num_tokens must be an integer in [0, 2147483647]"),
])
def test_a_batch_length_out_of_range_names_the_field_and_request(tmp_path, key, values, needle):
    d = json.loads((DUMP / "rank0.json").read_text())
    d[key] = values
    with pytest.raises(CpbenchInputError, match=re.escape(needle)):
        load_dump(_write(tmp_path, d))


def test_a_negative_extend_length_is_one_line_exit_2(tmp_path):
    d = json.loads((DUMP / "rank0.json").read_text())
    d.update(extend_seq_lens=[11, -13], seq_lens=[19, 1])
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"error: --check {str(tmp_path / 'dump.json')!r}: extend_seq_lens [11, -13] holds a "
                               "negative extend length (-13, request 1)")


@pytest.mark.parametrize("field,line", [
    ("kv_len_prev_list", "rank 0 kv_len_prev_list: engine null, cpbench [10, 16]"),
    ("page_table", "rank 0 page_table: engine null, cpbench expects 2 rows (one per request: [bs, W])"),
    ("swa_page_table", "rank 0 swa_page_table: engine null, cpbench expects [2, 1] (page_table's [rows, columns])"),
    ("zigzag_page_table", "rank 0 zigzag_page_table: engine null, cpbench [[412], [95], [412], [95]]"),
])
def test_a_null_field_is_a_difference_list_or_table(tmp_path, field, line):
    d = json.loads((DUMP / "rank0.json").read_text())
    d[field] = None
    differences, not_checked = _first_difference(tmp_path, d)
    assert differences == [line] and field not in not_checked


def test_a_null_table_leaves_its_copies_unchecked_and_saying_why(tmp_path):
    d = json.loads((DUMP / "rank0.json").read_text())
    d["page_table"] = None
    r = cpbench("geometry", "--check", str(_write(tmp_path, d)))
    assert r.returncode == 1 and "1 of 32 fields differ" in r.stdout
    assert "not checked (its source table page_table is null in the dump): swa_page_table, zigzag_page_table" in r.stdout


def test_null_fields_agree_where_cpbench_expects_none(tmp_path):
    """A batch that runs without CP: no metadata and no duplicated table, so null agrees for both kinds."""
    d = {"cp_size": 4, "cp_rank": 0, "extend_seq_lens": [7, 13], "extend_prefix_lens": [0, 0],
         "kv_len_prev_list": None, "zigzag_page_table": None, "eligible": False}
    differences, not_checked = _first_difference(tmp_path, d)
    assert differences == [] and not_checked == {}


def test_a_ragged_page_table_is_named_itself(tmp_path):
    """A page table with rows of different lengths has no shape: it is the error, not the tables built from
    it (the check used to blame swa_page_table's shape)."""
    import json
    import shutil

    from clirun import cpbench

    src = Path(__file__).resolve().parents[1] / "examples" / "sglang_dump_upstream_cp4"
    dump = tmp_path / "dump"
    shutil.copytree(src, dump)
    first = sorted(dump.glob("*.json"))[0]
    data = json.loads(first.read_text())
    data["page_table"] = [[412, 1], [95]]  # bs 2: a row short
    first.write_text(json.dumps(data))
    r = cpbench("geometry", "--check", dump)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "page_table has rows of" in r.stderr and "every row W entries" in r.stderr
