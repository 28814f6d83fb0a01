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


@pytest.mark.slow
def test_a_results_row_with_text_where_a_number_belongs_is_left_out(tmp_path, text_reports, rough_charts):
    """A hand-edited ``"bs": "one"`` is left out as a null ``bs`` is; report, plot and compare read the rest
    (``plot`` draws every chart of the rest, at 20 dpi)."""
    from runfactory import make_rows, manifest

    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(32,), timings=("eager",))
    rows[0]["bs"] = "one"
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "manifest.json").write_text(json.dumps(manifest()))
    for args in (("report", run), ("plot", run), ("compare", run, run)):
        r = cpbench(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert (f"warning: {run / 'results.jsonl'}: left out 1 row(s) (a hand-edited file?): line 1: bs 'one' (not "
                "an integer >= 1)") in r.stderr.splitlines(), (args, r.stderr)


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
    assert ("left out 1 row(s) (a hand-edited file?): line 1: mode 'triple' (not two-call / fused / cp-native)"
            in r.stderr)
    text = (run / "report.md").read_text()
    assert "triple" not in text and text.count("**incomplete**") == 1


def _hand_edited_run(tmp_path, edits: dict):
    """A cp 2 run of bs 1 and 2 (eager; 8 rows, one a line of results.jsonl) with ``edits`` ({row index: {field:
    value}}) applied."""
    from runfactory import make_rows, manifest

    rows = make_rows(cp_sizes=(2,), bss=(1, 2), seqs=(32,), timings=("eager",))
    for i, fields in edits.items():
        rows[i].update(fields)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "manifest.json").write_text(json.dumps(manifest()))
    return run


def test_rows_with_an_invalid_key_column_are_left_out_by_line(tmp_path, text_reports):
    """Attack: a hand-edited ``bs: null`` made the report invent a "bs -1" cell, and rank 99 or cp_size 0 were
    accepted. Such rows are left out as a mode of "triple" is, each named by file, line, field and value."""
    run = _hand_edited_run(tmp_path, {1: {"bs": None}, 2: {"rank": 99}, 5: {"cp_size": 0}, 6: {"cp_size": -2}})
    r = cpbench("report", run)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == (f"warning: {run / 'results.jsonl'}: left out 4 row(s) (a hand-edited file?): "
                                "line 2: bs null (not an integer >= 1); line 3: rank 99 (not a rank of cp_size 2: "
                                "0 to 1); line 6: cp_size 0 (not an integer >= 1); line 7: cp_size -2 (not an "
                                "integer >= 1)")
    text = (run / "report.md").read_text()
    assert "bs -1" not in text and "cp 0" not in text and "cp -2" not in text and "rank 99" not in text


def test_run_open_names_a_row_with_an_invalid_key_column(tmp_path):
    import cpbench as api
    from cpbench.errors import CpbenchWarning

    run = _hand_edited_run(tmp_path, {3: {"rank": 99}})
    with pytest.warns(CpbenchWarning, match=r"left out 1 row\(s\) .*: line 4: rank 99 \(not a rank of cp_size 2"):
        opened = api.Run.open(run)
    assert len(opened.rows) == 7 and set(opened.rows["rank"]) == {0, 1}


def test_a_run_whose_every_row_has_an_invalid_key_column_is_refused(tmp_path):
    run = _hand_edited_run(tmp_path, {i: {"bs": None} for i in range(8)})
    r = cpbench("report", run)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: {str(run / 'results.jsonl')!r}: no row has valid values (line 1: bs "
                               "null (not an integer >= 1); line 2: bs null")


def test_a_row_whose_value_does_not_fit_its_column_s_type_is_left_out_by_line(tmp_path, text_reports):
    """Attack: with results.jsonl alone, one hand-edited ``"latency_us_median": "fast"`` made `cpbench report`
    exit 2 and ``Run.open`` raise: the whole run was unreadable. The row is left out as one with an invalid key
    column is, named by file, line, field and value; text in a text column, a list in a list column still read."""
    import cpbench as api
    from cpbench.errors import CpbenchWarning

    run = _hand_edited_run(tmp_path, {1: {"latency_us_median": "fast"}, 4: {"reason": 7}, 6: {"samples_us": "x"}})
    r = cpbench("report", run)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == (f"warning: {run / 'results.jsonl'}: left out 3 row(s) (a hand-edited file?): "
                                "line 2: latency_us_median 'fast' (not a number); line 5: reason 7 (not text); "
                                "line 7: samples_us 'x' (not a list)")
    with pytest.warns(CpbenchWarning, match=r"left out 3 row\(s\) .*: line 2: latency_us_median 'fast' \(not a number\)"):
        opened = api.Run.open(run)
    assert len(opened.rows) == 5 and opened.rows["latency_us_median"].dtype == float


def test_a_run_whose_every_row_has_a_value_of_the_wrong_type_is_refused(tmp_path):
    run = _hand_edited_run(tmp_path, {i: {"latency_us_median": "fast"} for i in range(8)})
    r = cpbench("report", run)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: {str(run / 'results.jsonl')!r}: no row has valid values (line 1: "
                               "latency_us_median 'fast' (not a number); line 2: latency_us_median 'fast'")


def test_a_parquet_row_with_an_invalid_key_column_is_named_by_row(tmp_path):
    import pandas as pd
    from runfactory import make_run

    from cpbench.errors import CpbenchWarning
    from cpbench.results.store import load_run

    run = make_run(tmp_path / "run", cp_sizes=(2,), bss=(1,), seqs=(32,), timings=("eager",))
    df = pd.read_parquet(run / "results.parquet")
    df.loc[2, "rank"] = 99
    df.to_parquet(run / "results.parquet", index=False)
    with pytest.warns(CpbenchWarning, match=r"results.parquet: left out 1 row\(s\) .*: row 3: rank 99 "):
        rows, _ = load_run(run)
    assert len(rows) == len(df) - 1
