"""The results schema (cpbench.results.schema): real sweep rows pass check_row, the key and the options
fixed on --resume come from the columns, v1 and v2 rows migrate (v2 -> v3: FlashInfer's fa2 / fa3 read as
flashinfer-fa2 / flashinfer-fa3), and check_row finds what is wrong."""

import pytest

from cpbench.results import schema
from cpbench.results.schema import (COLUMNS, FIXED_ON_RESUME, KEY_COLUMNS, SCHEMA_VERSION, check_row, migrate_row,
                                    row_key)
from cpbench.results.store import read_jsonl
from clirun import cpbench

TINY = ["--layers", "2", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--page-size", "16"]


@pytest.fixture(scope="module")
def sweep_rows(tmp_path_factory):
    """Rows of a real CPU sweep (torch backend): cp 2, bs 1, seq 3 (ineligible: 3 < 2*cp), 32 and 64."""
    out = tmp_path_factory.mktemp("schema") / "run"
    r = cpbench("sweep", "--backend", "torch", "--cp", "2", "--bs", "1", "--seq", "3,32,64", "--mode", "two-call,fused",
                "--out", str(out), "--no-report", *TINY, "--budget-ms", "5", "--timing", "eager")
    assert r.returncode == 0, r.stderr[-2000:]
    return read_jsonl(out / "results.jsonl")


def test_every_row_of_a_real_sweep_passes_check_row(sweep_rows):
    assert len(sweep_rows) == 3 * 2 * 2  # 3 seqs x 2 ranks x 2 modes
    for row in sweep_rows:
        assert check_row(row) == [], (row["max_extend_len"], row["rank"], row["mode"], check_row(row))
    status = {(r["max_extend_len"], r["rank"], r["mode"]): r["status"] for r in sweep_rows}
    assert {s for (seq, *_), s in status.items() if seq == 3} == {"ineligible"}  # the status rows are checked too
    assert {s for (seq, *_), s in status.items() if seq != 3} == {"ok"}
    ok = [r for r in sweep_rows if r["status"] == "ok"]
    assert {r["schema_version"] for r in sweep_rows} == {SCHEMA_VERSION}
    assert {(r["launch"], r["world_size"], r["gather"], r["dtype"], r["backend"]) for r in sweep_rows} == \
        {("simulated", 1, "none", "bf16", "torch")}
    assert all(isinstance(r["samples_us"], list) and len(r["samples_us"]) == r["n_samples"] >= 3 for r in ok)
    assert len({row_key(r) for r in sweep_rows}) == len(sweep_rows)  # the key tells every row apart


def test_status_rows_carry_the_whole_key(sweep_rows):
    bad = [r for r in sweep_rows if r["status"] == "ineligible"]
    assert len(bad) == 4
    for r in bad:
        assert all(k in r for k in KEY_COLUMNS) and r["reason"] and "latency_us_median" not in r


def test_key_columns_and_fixed_on_resume_come_from_the_columns():
    for c in ("dtype", "launch", "world_size", "gather", "model", "backend", "timing", "cp_size", "bs", "max_extend_len",
              "prefix_len", "extend_lens", "rank", "mode"):
        assert c in KEY_COLUMNS, c
    assert "seq_lens" not in COLUMNS and "latency_us_median" not in KEY_COLUMNS
    run_cols = [c for c in COLUMNS.values() if c.role == "run"]
    assert {c.name for c in run_cols} == {"model", "backend", "dtype", "launch", "world_size", "gather", "fused_order",
                                          "tp_size"}
    assert "batch" in KEY_COLUMNS and "prefix_lens" not in KEY_COLUMNS
    assert KEY_COLUMNS[:len(run_cols)] == schema.RUN_COLUMNS  # run, then cell, then row columns
    assert KEY_COLUMNS[-2:] == ("rank", "mode")
    for c in run_cols:  # derived: every run column's sweep option must stay fixed on --resume
        assert c.option and c.option in FIXED_ON_RESUME, c.name
    assert {"seed", "prefix", "context_len", "check"} <= set(FIXED_ON_RESUME)
    assert len(FIXED_ON_RESUME) == len(set(FIXED_ON_RESUME))


def _v1_row():
    return {"schema_version": 1, "model": "gpt-oss-120b", "backend": "fa3", "timing": "eager", "dtype": "bf16",
            "cp_size": 4, "bs": 2, "seq_len": 2048, "prefix_len": 0, "seq_lens": "2048,1024", "rank": 3,
            "mode": "fused", "page_size": 64, "num_layers": 36, "status": "ok", "reason": "",
            "latency_us_median": 1459.9}


def test_migrate_v1_row():
    v1 = _v1_row()
    original = dict(v1)
    v2 = migrate_row(v1)
    assert v1 == original  # the input is not modified
    assert "seq_lens" not in v2 and v2["extend_lens"] == "2048,1024"
    assert (v2["launch"], v2["world_size"], v2["gather"], v2["seed"]) == ("simulated", 1, "none", 0)
    assert v2["schema_version"] == SCHEMA_VERSION == 3  # through v2, then v3
    assert v2["backend"] == "flashinfer-fa3"  # v1's fa3 was FlashInfer's
    assert v2["fused_order"] == "prev-next"
    assert (v2["tp_size"], v2["batch"], v2["prefix_lens"]) == (1, 0, "0,0")  # bs 2, prefix_len 0
    assert "seq_len" not in v2 and v2["max_extend_len"] == 2048  # renamed within v2, read under the new name
    assert (v2["backend_dist"], v2["backend_version"]) == ("cpbench", "")  # added within v3: no plugins before
    assert {k: v for k, v in v2.items() if k not in ("extend_lens", "launch", "world_size", "gather", "seed",
                                                        "fused_order", "schema_version", "tp_size", "batch",
                                                        "prefix_lens", "max_extend_len", "backend", "backend_dist",
                                                        "backend_version")} == \
        {k: v for k, v in v1.items() if k not in ("seq_lens", "schema_version", "seq_len", "backend")}
    assert check_row(v2) == []
    # a v1 row without schema_version (the v1 writer always wrote it, but the default is v1)
    bare = {k: v for k, v in _v1_row().items() if k != "schema_version"}
    assert migrate_row(bare)["extend_lens"] == "2048,1024" and migrate_row(bare)["launch"] == "simulated"


def test_migrate_keeps_a_current_row_unchanged():
    v3 = migrate_row(_v1_row())
    v3.update(launch="torchrun", world_size=4, gather="packed", seed=7)
    snapshot = dict(v3)
    assert migrate_row(v3) == snapshot and migrate_row(v3)["launch"] == "torchrun"
    assert migrate_row(migrate_row(_v1_row())) == migrate_row(_v1_row())  # idempotent


def _v2_row(backend: str) -> dict:
    """A row as schema 2 stored it (every column added within v2 present)."""
    return {**migrate_row(_v1_row()), "schema_version": 2, "backend": backend}


@pytest.mark.parametrize("old,new", [("fa3", "flashinfer-fa3"), ("fa2", "flashinfer-fa2"), ("torch", "torch"),
                                     ("trtllm-fmha-v2", "trtllm-fmha-v2"), ("flex", "flex")])
def test_a_v2_row_reads_with_flashinfers_backends_renamed(old, new):
    v2 = _v2_row(old)
    snapshot = dict(v2)
    got = migrate_row(v2)
    assert v2 == snapshot  # the input is not modified
    assert got == {**snapshot, "backend": new, "schema_version": 3} and check_row(got) == []


def test_a_v1_row_reads_with_fa2_renamed_too():
    got = migrate_row({**_v1_row(), "backend": "fa2"})
    assert (got["backend"], got["schema_version"], got["extend_lens"]) == ("flashinfer-fa2", 3, "2048,1024")


def test_a_current_row_of_fa3_stays_fa3():
    """Schema 3's fa3 is FlashAttention-3: a row written now is not renamed, on any read path."""
    import pandas as pd

    from cpbench.results.store import migrate_frame

    v3 = {**migrate_row(_v1_row()), "backend": "fa3"}
    assert migrate_row(v3) == v3
    got = migrate_frame(pd.DataFrame([v3, {**v3, "rank": 2}]), {"schema_version": 3})
    assert list(got["backend"]) == ["fa3", "fa3"] and set(got["schema_version"]) == {3}


def test_a_v2_row_without_a_backend_or_of_another_version_is_left_as_it_is():
    bare = {k: v for k, v in _v2_row("fa3").items() if k != "backend"}
    assert "backend" not in migrate_row(bare) and migrate_row(bare)["schema_version"] == 3
    assert migrate_row({**_v2_row("fa3"), "schema_version": 99})["backend"] == "fa3"  # the store refuses it


@pytest.mark.parametrize("names", [["fa3", "trtllm-fmha-v2", "fa2", "torch"], ["fa3"] * 3])
def test_a_v2_frame_is_renamed_as_a_whole_as_its_rows_would_be(names):
    import pandas as pd

    from cpbench.results.store import migrate_frame

    rows = [{**_v2_row(b), "rank": i} for i, b in enumerate(names)]
    df = pd.DataFrame(rows)
    got = migrate_frame(df, {"schema_version": 2})
    assert list(df["backend"]) == names and set(df["schema_version"]) == {2}  # the input is not modified
    assert got.to_dict("records") == [migrate_row(r) for r in rows]
    assert set(got["schema_version"]) == {SCHEMA_VERSION}
    # without a schema_version column, the manifest's version says how to read it
    no_version = migrate_frame(df.drop(columns="schema_version"), {"schema_version": 2})
    assert list(no_version["backend"]) == [schema.V3_BACKENDS.get(b, b) for b in names]


def test_a_frame_of_v2_and_current_rows_is_migrated_row_by_row():
    """Each row's own version says what its fa3 is: FlashInfer's in a v2 row, FlashAttention-3 in a current one."""
    import pandas as pd

    from cpbench.results.store import migrate_frame

    rows = [{**_v2_row("fa3"), "rank": 0}, {**_v2_row("fa3"), "rank": 1, "schema_version": 3}]
    got = migrate_frame(pd.DataFrame(rows), {"schema_version": 2})
    assert list(got["backend"]) == ["flashinfer-fa3", "fa3"] and set(got["schema_version"]) == {3}


@pytest.mark.parametrize("command,want", [
    ("cpbench sweep --cp 4 --backend trtllm-fmha-v2,fa3 --out runs/x-fa3",
     "cpbench sweep --cp 4 --backend trtllm-fmha-v2,flashinfer-fa3 --out runs/x-fa3"),
    ("cpbench sweep --backend=fa2 --cp 2", "cpbench sweep --backend=flashinfer-fa2 --cp 2"),
    ("cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-fa3", "cpbench sweep --cp 4 --bs 1,4,16 --out runs/h200-fa3"),
    ("cpbench sweep --backend torch,flex", "cpbench sweep --backend torch,flex")])
def test_a_recorded_command_runs_the_kernel_it_ran(command, want):
    assert schema.renamed_command(command) == want


def test_a_v2_row_without_fused_order_gets_prev_next():
    v2 = migrate_row(_v1_row())
    del v2["fused_order"]
    snapshot = dict(v2)
    got = migrate_row(v2)
    assert v2 == snapshot  # the input is not modified
    assert got == {**snapshot, "fused_order": "prev-next"} and check_row(got) == []
    assert "fused_order" in KEY_COLUMNS


def test_a_v2_row_from_before_tp_and_batches_gets_their_defaults():
    row = {k: v for k, v in migrate_row(_v1_row()).items() if k not in ("tp_size", "batch", "prefix_lens")}
    row.update(prefix_len=512, bs=3)
    out = migrate_row(row)
    assert (out["tp_size"], out["batch"], out["prefix_lens"]) == (1, 0, "512,512,512")
    assert migrate_row({**row, "tp_size": 8, "batch": 2, "prefix_lens": "1,2,3"})["tp_size"] == 8


def test_check_row_reports_unknown_column_and_wrong_type():
    good = migrate_row(_v1_row())
    assert check_row(good) == []
    assert check_row({**good, "latency_ms": 1.0}) == ["unknown column 'latency_ms'"]
    assert check_row({**good, "seq_lens": "2048"}) == ["unknown column 'seq_lens'"]  # the v1 name is no column
    assert check_row({**good, "cp_size": "4"}) == ["cp_size='4' is not int"]
    assert check_row({**good, "bs": True}) == ["bs=True is not int"]  # a bool is no int
    assert check_row({**good, "latency_us_median": "fast"}) == ["latency_us_median='fast' is not float"]
    assert check_row({**good, "samples_us": (1.0, 2.0)}) == ["samples_us=(1.0, 2.0) is not list"]
    assert check_row({**good, "status": "weird"}) == [f"status 'weird' not in {schema.STATUSES}"]
    missing = {k: v for k, v in good.items() if k != "launch"}
    assert check_row(missing) == ["key column 'launch' missing"]
    # allowed: NaN in an int column, None anywhere, an int in a float column, a setup_us_* part
    assert check_row({**good, "n_samples": float("nan"), "max_abs_err": None, "flops": 3,
                      "setup_us_custom": 1.0}) == []
    # a derived column is computed on read (results.derived), never stored
    assert check_row({**good, "tflops": None}) == ["column 'tflops' is derived on read (results.derived), not stored"]


def test_a_stored_v2_frame_without_fused_order_gets_prev_next(tmp_path):
    import pandas as pd

    from cpbench.results.store import migrate_frame

    df = pd.DataFrame([{k: v for k, v in migrate_row(_v1_row()).items() if k != "fused_order"}])
    got = migrate_frame(df, {"schema_version": SCHEMA_VERSION})
    assert list(got["fused_order"]) == ["prev-next"] and "fused_order" not in df.columns
