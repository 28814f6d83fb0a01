"""`cpbench geometry --check`: an engine's per-rank metadata dump against cpbench's (exit 0 / 1 / 2)."""

import json
from pathlib import Path

import pytest
from clirun import cpbench

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sglang_cp_metadata_cp4.json"


def _example() -> dict:
    return json.loads(EXAMPLE.read_text())


def test_shipped_example_matches():
    r = cpbench("geometry", "--check", str(EXAMPLE))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all 28 fields agree" in r.stdout  # 4 ranks x 7 fields
    assert "cp_size 4, extend [11, 13], prefix [8, 14]; ranks 0, 1, 2, 3" in r.stdout


def test_a_mismatch_names_the_rank_and_the_field(tmp_path):
    d = _example()
    d["ranks"][1]["kv_len_prev"] = [12, 19]  # cpbench: [12, 18]
    d["ranks"][3]["max_seqlen_q_combined"] = 1  # cpbench: 2
    p = tmp_path / "dump.json"
    p.write_text(json.dumps(d))
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 1
    assert "first difference: rank 1 kv_len_prev: engine [12, 19], cpbench [12, 18]" in r.stdout
    assert "2 of 28 fields differ" in r.stdout


def test_the_list_form_takes_the_batch_from_the_options(tmp_path):
    """The bare list `geometry --json` prints (every field, eligible and reason included) checks against the
    batch of --cp/--extend/--prefix; a partial dump (one rank, two fields) is checked field by field."""
    p = tmp_path / "list.json"
    p.write_text(cpbench("geometry", "--cp", "2", "--extend", "9,4", "--prefix", "3,0", "--json").stdout)
    ok = cpbench("geometry", "--check", str(p), "--cp", "2", "--extend", "9,4", "--prefix", "3,0")
    assert ok.returncode == 0 and "all 16 fields agree" in ok.stdout  # 2 ranks x 8 fields
    bad = cpbench("geometry", "--check", str(p), "--cp", "2", "--extend", "9,4", "--prefix", "0")  # prefixes differ
    assert bad.returncode == 1 and "rank 0 kv_len_prev: engine [6, 1], cpbench [3, 1]" in bad.stdout
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{"rank": 1, "actual_seq_q_prev": [2, 1], "kv_len_next": [7, 3]}]))
    r = cpbench("geometry", "--check", str(one), "--cp", "2", "--extend", "9,4", "--prefix", "0")
    assert r.returncode == 0 and "all 2 fields agree" in r.stdout and "ranks 1" in r.stdout
    r = cpbench("geometry", "--check", str(one), "--cp", "2", "--extend", "9,4")  # kv_len_next needs the prefix
    assert r.returncode == 2 and "no prefix lengths, and kv_len_next depends on them" in r.stderr


@pytest.mark.parametrize("content,needle", [
    ("{not json", "is not valid JSON"),
    ("[]", "non-empty list of rank objects"),
    ('[{"kv_len_prev": [1]}]', "one integer rank >= 0"),
    ('[{"rank": 0, "cp_rank": 0, "bs": 1}]', "one integer rank >= 0"),
    ('[{"rank": 0, "kv_len_prev": [1]}, {"rank": 0}]', "rank 0 appears twice"),
    ('[{"rank": 0, "kv_lens": [1]}]', "no field to compare"),
    ('[{"rank": 0, "page_table": [1, 2]}]', "page_table must be a list of rows of integers"),
    ('[{"rank": 0, "kv_len_prev": "10,16"}]', "kv_len_prev must be a list of integers"),
    ('[{"rank": 0, "reason": ""}]', "no field to compare"),
    ('{"ranks": [{"rank": 0, "kv_len_prev": [1]}], "seq": [3]}', "unknown key 'seq'"),
    ('{"cp_size": 2, "ranks": [{"rank": 0, "kv_len_prev": [1]}]}', "needs cp_size and extend_seq_lens"),
    ('{"cp_size": 4, "extend_seq_lens": [11, 13], "ranks": [{"rank": 7, "actual_seq_q_prev": [1]}]}',
     "rank 7, outside [0, cp_size=4)"),
    ('[{"rank": 0, "actual_seq_q_prev": [1]}]', "does not say its batch"),
    ('{"cp_size": 1, "extend_seq_lens": [5], "ranks": [{"rank": 0, "bs": 1}]}', "builds no CP strategy"),
    ('{"cp_size": 4, "extend_seq_lens": [11, 13], "extend_prefix_lens": [-6, 14], "seq_lens": [5, 27], '
     '"ranks": [{"rank": 0, "kv_len_prev": [1, 1]}]}',
     "extend_prefix_lens [-6, 14] holds a negative prefix length (-6, request 0): prefix lengths must be in "
     "[0, 2147483647] tokens"),
])
def test_malformed_dump_exit_2(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_options_that_clash_with_the_dump(tmp_path):
    r = cpbench("geometry", "--check", str(EXAMPLE), "--cp", "4")
    assert r.returncode == 2 and "gives the batch" in r.stderr
    r = cpbench("geometry", "--check", str(EXAMPLE), "--json")
    assert r.returncode == 2 and "drop --json and --rank" in r.stderr
    r = cpbench("geometry", "--check", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read --check" in r.stderr


def test_a_dump_without_its_batch_needs_the_batch_given(tmp_path):
    """The list `geometry --json` prints carries no batch: it is never checked against a default one (a dump
    of extend 20,30 was once compared with 11,13 and reported 28 false differences)."""
    p = tmp_path / "list.json"
    p.write_text(cpbench("geometry", "--cp", "4", "--extend-lens", "20,30", "--json").stdout)
    r = cpbench("geometry", "--check", str(p), "--prefix-lens", "0")
    assert r.returncode == 2 and "does not say its batch" in r.stderr and "--extend-lens" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    ok = cpbench("geometry", "--check", str(p), "--cp", "4", "--extend-lens", "20,30", "--prefix-lens", "0")
    assert ok.returncode == 0 and "fields agree" in ok.stdout


def test_a_dump_with_a_utf8_byte_order_mark_is_read(tmp_path):
    """An editor that saves UTF-8 with a BOM (Notepad, PowerShell's Out-File) does not make the dump 'invalid
    JSON'; the model config goes through the same reader."""
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes())
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 0 and "all 28 fields agree" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("page", [2**31 + 5, 2**40, -3])
def test_a_page_id_no_pool_can_have_is_refused(tmp_path, page):
    """Attack: page ids of 2**31+5, 2**40 or -3 printed "all 34 fields agree" and exited 0."""
    import shutil

    dump = tmp_path / "dump"
    shutil.copytree(Path(__file__).parent.parent / "examples" / "sglang_dump_cp4", dump)
    d = json.loads((dump / "rank0.json").read_text())
    d["zigzag_page_table"][0][0] = page
    (dump / "rank0.json").write_text(json.dumps(d))
    r = cpbench("geometry", "--check", dump)
    assert r.returncode == 2 and f"zigzag_page_table holds page id {page}, which no KV pool has" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
