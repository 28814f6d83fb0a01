"""User JSON files that must end in one line and exit 2: never a traceback, a hang or exhausted memory."""

import json
import os

import pytest

from clirun import cpbench


def _config(tmp_path, **over):
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16}
    cfg.update(over)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("text,message", [
    ("[" * 100000 + "]" * 100000, "is not JSON cpbench can read: RecursionError"),
    ('{"num_hidden_layers": ' + "9" * 5000 + "}", "is not JSON cpbench can read: ValueError"),
])
def test_unreadable_json_is_one_line(tmp_path, text, message):
    p = tmp_path / "config.json"
    p.write_text(text)
    r = cpbench("sweep", "--device", "cpu", "--model-config", str(p), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_an_absurd_head_dim_is_refused_at_once(tmp_path):
    r = cpbench("sweep", "--device", "cpu", "--model-config", str(_config(tmp_path, head_dim=10_000_000)),
                "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "head_dim must be in [1, 4096], got 10000000" in r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_fifo_is_not_read_and_nothing_blocks(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    for args in (("sweep", "--device", "cpu", "--model-config", str(fifo)), ("geometry", "--check", str(fifo))):
        r = cpbench(*args)
        assert r.returncode == 2 and "is not a regular file" in r.stderr, r.stderr


def test_geometry_check_refuses_an_absurd_cp_size(tmp_path):
    p = tmp_path / "dump.json"
    p.write_text(json.dumps({"cp_size": 10 ** 20, "extend_seq_lens": [11, 13], "ranks": [{"rank": 0, "kv_len_prev": [1]}]}))
    r = cpbench("geometry", "--check", str(p))
    assert r.returncode == 2 and "cp_size must be an integer in [1, 1024]" in r.stderr


def test_lengths_with_nan_bounds_are_one_line():
    r = cpbench("sweep", "--device", "cpu", "--lengths", "dist:uniform:nan:10")
    assert r.returncode == 2 and "LO and HI must be integers" in r.stderr and "Traceback" not in r.stderr


def test_a_results_row_with_text_where_a_number_belongs_is_one_line(tmp_path, text_reports):
    from runfactory import make_rows, manifest

    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(32,), timings=("eager",))
    rows[0]["bs"] = "one"
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "manifest.json").write_text(json.dumps(manifest()))
    for args in (("report", run), ("plot", run), ("compare", run, run)):
        r = cpbench(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip() == (f"error: {str(run / 'results.jsonl')!r}: column 'bs' holds 'one' in 1 row(s) "
                                    "where a number belongs (a hand-edited file?): correct those values or delete "
                                    "those rows")


def test_a_parquet_with_both_seq_len_and_max_extend_len_is_one_line(tmp_path):
    import pandas as pd
    from runfactory import make_run

    run = make_run(tmp_path / "run", cp_sizes=(2,), bss=(1,), seqs=(32,), timings=("eager",))
    df = pd.read_parquet(run / "results.parquet")
    df.assign(seq_len=df["max_extend_len"]).to_parquet(run / "results.parquet", index=False)  # an old column kept
    for args in (("report", run), ("compare", run, run)):
        r = cpbench(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip() == (f"error: {str(run / 'results.parquet')!r} holds both column 'seq_len' and its new "
                                    "name 'max_extend_len': keep one (drop 'seq_len' if both hold the same values), "
                                    "or delete the file if results.jsonl beside it holds the rows")


def test_a_row_with_an_unknown_mode_is_left_out_by_name(tmp_path, text_reports):
    """Attack: one row's mode set to "triple" made the report say "0 of 4 cells ran" and list every cell as
    incomplete ("no row for rank 0 triple"). The row is left out, named in one warning; only its cell lacks it."""
    from runfactory import make_rows, manifest

    rows = make_rows(cp_sizes=(2,), bss=(1, 2), seqs=(32,), timings=("eager",))
    rows[0]["mode"] = "triple"
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "manifest.json").write_text(json.dumps(manifest()))
    r = cpbench("report", run)
    assert r.returncode == 0, r.stderr
    assert "left out 1 row(s): 1 with mode 'triple' (not two-call / fused / cp-native)" in r.stderr
    text = (run / "report.md").read_text()
    assert "triple" not in text and text.count("**incomplete**") == 1
