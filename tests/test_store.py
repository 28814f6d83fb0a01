"""The run directory (cpbench.results.store.RunDir): committed schema-v1 and v2 runs load migrated (v3: FlashInfer's
backends renamed, in the rows and the manifest) and still report and compare; one sweep at a time per --out (the
lock); --resume refuses a v1 or v2 run; a torn last line."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from cpbench.results.compare import compare_runs
from cpbench.results.schema import DERIVED_COLUMNS, KEY_COLUMNS, SCHEMA_VERSION, check_row, migrate_row
from cpbench.results.store import RunDir, load_run, read_jsonl
from cpbench.errors import CpbenchInputError, CpbenchWarning
from clirun import cpbench

RUNS = Path(__file__).parent.parent / "docs" / "runs"
COMMITTED = sorted(p.name for p in RUNS.iterdir() if (p / "results.jsonl").exists())
V1 = [n for n in COMMITTED if json.loads((RUNS / n / "manifest.json").read_text())["schema_version"] == 1]
V2 = [n for n in COMMITTED if n not in V1]
TINY = ["--layers", "2", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--page-size", "16"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
    [str(Path(__file__).parent.parent / "src"), os.environ.get("PYTHONPATH", "")])}


def test_committed_runs_are_schema_v1_or_v2_through_and_through():
    assert len(V1) >= 6 and len(V2) >= 4, (V1, V2)  # the schema-v1 runs, and the 2 x H200 (v2) runs
    for names, version in ((V1, 1), (V2, 2)):
        for name in names:
            assert {r["schema_version"] for r in read_jsonl(RUNS / name / "results.jsonl")} == {version}, name


@pytest.mark.parametrize("name", V2)
def test_committed_v2_runs_load_migrated_to_v3(name):
    df, manifest = RunDir(RUNS / name).load()
    assert set(df["schema_version"]) == {SCHEMA_VERSION} and set(df["world_size"]) == {manifest.get("world_size", 1)}
    assert not {"fa2", "fa3"} & set(df["backend"])  # FlashInfer's, read under their schema 3 names
    assert set(manifest["config"]["backend"].split(",")) == set(df["backend"])  # the manifest's config too
    assert manifest["schema_version"] == 2  # the manifest keeps the version it was written with
    torchrun = manifest["config"].get("launch") == "torchrun"
    assert set(df["launch"]) == ({"torchrun"} if torchrun else {"simulated"})
    assert torchrun == ("torchrun" in name or "gloo" in name)


@pytest.mark.parametrize("name", V1)
def test_committed_v1_run_loads_migrated(name):
    run = RunDir(RUNS / name)
    raw = read_jsonl(run.results)
    df, manifest = run.load()  # from results.parquet (v1), migrated row by row
    assert len(df) == len({tuple(str(migrate_row(r).get(c)) for c in KEY_COLUMNS if c != "extend_lens") for r in raw})
    assert "seq_lens" not in df.columns and df["extend_lens"].notna().all()
    assert list(df["extend_lens"]) != [] and set(df["launch"]) == {"simulated"}
    assert set(df["world_size"]) == {1} and set(df["gather"]) == {"none"} and set(df["seed"]) == {0}
    assert set(df["schema_version"]) == {SCHEMA_VERSION}
    by_key = {(r["cp_size"], r["bs"], r["seq_len"], r["rank"], r["mode"], r["timing"]): r["seq_lens"] for r in raw}
    for r in df.itertuples():  # extend_lens holds what v1 called seq_lens, row for row
        assert r.extend_lens == by_key[(r.cp_size, r.bs, r.max_extend_len, r.rank, r.mode, r.timing)]
    for r in run.rows():  # the jsonl path migrates the same way, and every migrated row is a valid v2 row
        stored = {k: v for k, v in r.items() if k not in DERIVED_COLUMNS and not (isinstance(v, float) and v != v)}
        assert check_row(stored) == [], name  # (v1 stored some derived columns; a reader recomputes them)
    assert "seq_lens" not in manifest["config"]  # a v1 config key is read as extend_lens
    ok = df[df["status"] == "ok"]
    assert len(ok) and (ok["latency_us_median"] > 0).all()


@pytest.mark.parametrize("name", ["cpu-torch-v1", "h200-fa3-cp2-cp8"])  # CPU and GPU, two cp sizes
@pytest.mark.slow
def test_report_and_compare_of_committed_v1_run(tmp_path, text_reports, name):
    run = tmp_path / name  # report writes report.md into the run directory: work on a copy
    shutil.copytree(RUNS / name, run)
    (run / "report.md").unlink()
    r = cpbench("report", str(run))
    assert r.returncode == 0, r.stderr[-2000:]
    text = (run / "report.md").read_text()
    assert text.startswith(f"# cpbench: fused vs two-call zigzag CP prefill attention — `{name}`")
    assert "| results schema | 1 |" in text  # the manifest's version is shown as written
    res, _, _ = compare_runs(run, run)
    ok = (df := run_frame(run))[df["status"] == "ok"]
    assert len(res.table) == len(ok) > 0 and set(res.table["verdict"]) == {"tie"}
    assert (res.table["ratio"] == 1.0).all() and res.exit_code == 0 and res.not_comparable.empty
    before = {p.name: p.read_bytes() for p in (RUNS / name).iterdir() if p.is_file()}
    r = cpbench("compare", str(RUNS / name), str(RUNS / name))  # compare never writes into a run
    assert r.returncode == 0, r.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in (RUNS / name).iterdir() if p.is_file()} == before


def run_frame(run):
    return load_run(run)[0]


# -- one sweep per --out ------------------------------------------------------------------------------
def _sweep(out, *extra):
    return ["sweep", "--backend", "torch", "--cp", "2", "--bs", "1", "--out", str(out), "--no-report", *TINY, *extra]


@pytest.mark.slow
def test_second_sweep_into_a_locked_out_exits_2_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    first = _sweep(out, "--seq", "32,48,64,80,96,112,128", "--budget-ms", "200")
    proc = subprocess.Popen([sys.executable, "-m", "cpbench", *first], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=ENV)
    try:
        deadline = time.time() + 240
        rows = out / "results.jsonl"
        # wait for a row, not just the file (the run directory creates it empty before its first cell)
        while time.time() < deadline and not (rows.exists() and rows.stat().st_size) and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the first sweep ended before the test could race it"
        proc.send_signal(signal.SIGSTOP)  # keep its lock, freeze its file
        time.sleep(0.2)
        before = (out / "results.jsonl").read_bytes()
        manifest = (out / "manifest.json").read_bytes()
        assert before
        for extra in ([], ["--resume"]):  # with or without --resume, the lock is checked first
            r = cpbench(*_sweep(out, "--seq", "16", "--budget-ms", "5"), *extra)
            assert r.returncode == 2, (extra, r.stdout[-500:], r.stderr[-500:])
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1, r.stderr
            assert f"is being written by pid {proc.pid} (cpbench sweep --backend torch --cp 2" in lines[0]
            assert str(out) in lines[0] and "Traceback" not in r.stderr
        assert (out / "results.jsonl").read_bytes() == before  # the second sweep wrote nothing
        assert (out / "manifest.json").read_bytes() == manifest
        # the holder is this process too while it keeps a RunDir open (flock is per open file)
        with pytest.raises(CpbenchInputError, match=f"is being written by pid {proc.pid} "):
            RunDir.create(out, resume=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    rows = read_jsonl(out / "results.jsonl")
    assert all(r["max_extend_len"] != 16 for r in rows)  # no row of the refused sweep
    # once the holder is gone the lock is free again (a killed process releases its flock)
    held = RunDir.create(out, resume=True)
    held.unlock()


def test_lock_held_in_this_process_refuses_a_sweep(tmp_path):
    out = tmp_path / "run"
    held = RunDir.create(out, resume=False)
    try:
        RunDir(out).append(_row(0))
        before = (out / "results.jsonl").read_bytes()
        r = cpbench(*_sweep(out, "--seq", "32", "--budget-ms", "5"))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"is being written by pid {os.getpid()} " in r.stderr
        assert (out / "results.jsonl").read_bytes() == before
        assert not (out / "manifest.json").exists()
    finally:
        held.unlock()


def test_resume_of_a_v1_run_is_refused_in_one_line(tmp_path, text_reports):
    run = tmp_path / "v1"
    shutil.copytree(RUNS / "cpu-torch-v1", run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    r = cpbench(*_sweep(run, "--seq", "32", "--budget-ms", "5"), "--resume")
    assert r.returncode == 2, r.stderr[-1000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "was written by results schema 1, this cpbench writes 3: start a new --out" in lines[0]
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before
    # and its lock was released: the run still reports
    assert cpbench("report", str(run)).returncode == 0


def test_resume_of_a_v2_run_is_refused_naming_its_version(tmp_path, text_reports):
    """A schema 2 run reads with FlashInfer's backends renamed, but is never resumed: its manifest keeps version 2."""
    run = tmp_path / "v2"
    shutil.copytree(RUNS / "cpu-torch-default", run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    r = cpbench(*_sweep(run, "--seq", "32", "--budget-ms", "5"), "--resume")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "was written by results schema 2, this cpbench writes 3: start a new --out" in r.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before


def _v2_run(tmp_path, fmt: str) -> Path:
    """A synthetic schema 2 run of FlashInfer's fa3 and fa2 (as schema 2 named them), its rows in ``fmt``."""
    from runfactory import write_run

    rows = [{**_row(i), "schema_version": 2, "backend": b, "prefix_lens": "0"}
            for i, b in enumerate(("fa3", "fa2", "torch"))]
    return write_run(tmp_path / fmt, rows, fmt=fmt, manifest_over={
        "schema_version": 2, "command": "cpbench sweep --backend fa3,fa2,torch --cp 4 --out runs/fa3",
        "resumed_by": ["cpbench sweep --backend=fa3,fa2,torch --out runs/fa3 --resume", None],
        "config": {"backend": "fa3,fa2,torch", "cp_sizes": [4]}})


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_v2_run_reads_flashinfers_backends_under_their_new_names(tmp_path, monkeypatch, fmt):
    from cpbench.results import store

    run = _v2_run(tmp_path, fmt)
    if fmt == "parquet":  # a v2 frame is renamed as a whole, never row by row
        monkeypatch.setattr(store, "migrate_row", lambda row: pytest.fail("a v2 frame was migrated row by row"))
    df, manifest = load_run(run)
    assert sorted(df["backend"]) == ["flashinfer-fa2", "flashinfer-fa3", "torch"]
    assert set(df["schema_version"]) == {SCHEMA_VERSION}
    assert manifest["config"]["backend"] == "flashinfer-fa3,flashinfer-fa2,torch"
    assert manifest["command"] == "cpbench sweep --backend flashinfer-fa3,flashinfer-fa2,torch --cp 4 --out runs/fa3"
    assert manifest["resumed_by"] == ["cpbench sweep --backend=flashinfer-fa3,flashinfer-fa2,torch --out runs/fa3 "
                                      "--resume", None]
    assert manifest["schema_version"] == 2  # as written: a --resume refuses the run by it
    assert json.loads((run / "manifest.json").read_text())["config"]["backend"] == "fa3,fa2,torch"  # read, not written
    if fmt == "jsonl":  # and so is every row a resume would read
        assert [r["backend"] for r in RunDir(run).rows()] == ["flashinfer-fa3", "flashinfer-fa2", "torch"]


def test_a_current_manifest_keeps_fa3(tmp_path):
    """In a schema 3 manifest fa3 is FlashAttention-3: nothing is renamed."""
    (tmp_path / "manifest.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "command": "cpbench sweep --backend fa3,flashinfer-fa3",
        "config": {"backend": "fa3,flashinfer-fa3"}}))
    manifest = RunDir(tmp_path).read_manifest()
    assert manifest["config"]["backend"] == "fa3,flashinfer-fa3"
    assert manifest["command"] == "cpbench sweep --backend fa3,flashinfer-fa3"


def test_a_v1_manifest_without_a_version_is_renamed_and_odd_values_are_left(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"command": 7, "resumed_by": [],
                                                        "config": {"backend": ["fa3"], "backends": ["fa2", 3]}}))
    manifest = RunDir(tmp_path).read_manifest()  # no schema_version: a v1 manifest
    assert manifest["config"] == {"backend": ["fa3"], "backends": ["flashinfer-fa2", 3]} and manifest["command"] == 7


# -- torn last line -----------------------------------------------------------------------------------
def _row(i):
    """A minimal valid row (every key column) of rank ``i``."""
    return {"schema_version": SCHEMA_VERSION, "model": "m", "backend": "torch", "dtype": "fp32", "launch": "simulated",
            "world_size": 1, "gather": "none", "fused_order": "prev-next", "tp_size": 1, "timing": "eager",
            "cp_size": 4, "bs": 1, "max_extend_len": 32, "prefix_len": 0, "extend_lens": "32", "batch": 0,
            "rank": i, "mode": "fused", "status": "ok", "latency_us_median": 1.5 * i}


def test_append_after_a_torn_last_line_keeps_every_row(tmp_path):
    run = RunDir(tmp_path)
    for i in range(3):
        run.append(_row(i))
    text = run.results.read_bytes()
    run.results.write_bytes(text + b'{"schema_version": 2, "rank": 99, "mo')  # killed mid-write
    with pytest.warns(CpbenchWarning, match="line 4 is cut off mid-row"):
        assert [r["rank"] for r in read_jsonl(run.results)] == [0, 1, 2]  # the torn line is left out
    run.append(_row(3))
    after = run.results.read_bytes()
    assert after.startswith(text) and after.endswith(b"\n")
    lines = after.decode().splitlines()
    assert [json.loads(x)["rank"] for x in lines] == [0, 1, 2, 3]  # every line parses, no row lost
    # rows come back as written, with the columns added within schema 2 and 3 filled in
    assert run.rows() == [{**_row(i), "prefix_lens": "0", "backend_dist": "cpbench", "backend_version": ""}
                          for i in range(4)]


def test_a_torn_last_line_is_left_out_with_a_warning_naming_it(tmp_path):
    """#49: a results.jsonl cut mid-line (a sweep killed mid-write) lost its last row without a word."""
    run = RunDir(tmp_path)
    for i in range(3):
        run.append(_row(i))
    run.results.write_bytes(run.results.read_bytes() + b'{"schema_version": 3, "rank": 3, "mo')
    with pytest.warns(CpbenchWarning) as seen:
        assert [r["rank"] for r in read_jsonl(run.results)] == [0, 1, 2]
    assert [str(w.message) for w in seen] == [
        f"{run.results}: line 4 is cut off mid-row (a sweep stopped while writing it): that row is left out, "
        "and a --resume measures it again"]


def test_append_after_a_torn_first_line_and_nan(tmp_path):
    run = RunDir(tmp_path)
    run.results.write_bytes(b'{"schema_ver')  # killed while writing the first row
    run.append({**_row(0), "max_abs_err": float("nan")})
    assert run.results.read_text() == json.dumps({**_row(0), "max_abs_err": None}) + "\n"  # NaN stored as null
    run.append(_row(1))
    assert [r["rank"] for r in run.rows()] == [0, 1]
    df = run.finalize()
    assert len(df) == 2 and pd.read_parquet(run.parquet)["rank"].tolist() == [0, 1]


def test_append_refuses_a_row_that_breaks_the_schema(tmp_path):
    run = RunDir(tmp_path)
    for bad, why in (({**_row(0), "tflops": 1.0}, "column 'tflops' is derived on read"),
                     ({**_row(0), "cp_size": "4"}, "cp_size='4' is not int"),
                     ({k: v for k, v in _row(0).items() if k != "rank"}, "key column 'rank' missing")):
        with pytest.raises(ValueError, match=why):
            run.append(bad)
    assert not run.results.exists()  # nothing written


def test_a_cells_rows_are_written_at_once_or_not_at_all(tmp_path, monkeypatch):
    """append_rows writes a cell's rows in one write (a kill leaves the cell whole or absent), after a torn
    line is cut; one bad row writes none of them."""
    run = RunDir(tmp_path)
    run.append(_row(0))
    run.results.write_bytes(run.results.read_bytes() + b'{"rank": 9')  # killed mid-write
    with pytest.raises(ValueError, match="key column 'rank' missing"):
        run.append_rows([_row(1), {k: v for k, v in _row(2).items() if k != "rank"}])
    with pytest.warns(CpbenchWarning, match="line 2 is cut off mid-row"):  # nothing written: still torn
        assert [r["rank"] for r in run.rows()] == [0]
    writes = []
    real_open = open

    def counting_open(*a, **kw):
        f = real_open(*a, **kw)
        write = f.write
        f.write = lambda b: writes.append(b) or write(b)
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    run.append_rows([_row(1), _row(2), _row(3)])
    monkeypatch.undo()
    assert len(writes) == 1 and [r["rank"] for r in run.rows()] == [0, 1, 2, 3]


def test_out_into_a_directory_of_other_runs_is_refused(tmp_path):
    from runfactory import make_run

    runs = tmp_path / "runs"
    make_run(runs / "20250101-000000", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    with pytest.raises(CpbenchInputError, match="holds other runs \\(e.g. '20250101-000000'\\)"):
        RunDir.create(runs, resume=False)
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "1", "--seq", "32", "--layers", "2", "--out", runs)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "holds other runs" in r.stderr
    assert not (runs / "results.jsonl").exists() and not (runs / "manifest.json").exists()
    RunDir.create(runs / "new-run", resume=False).unlock()  # a directory of its own is fine


def test_resume_of_a_run_without_results_jsonl_is_refused(tmp_path):
    """A committed or copied run keeps only results.parquet: a resume would append to a new results.jsonl
    and rewrite the parquet from it, losing every committed row, so it is refused (and so is a new sweep)."""
    run = tmp_path / "committed"
    shutil.copytree(RUNS / "h200-fmha-v2-default-a", run)
    before = (run / "results.parquet").read_bytes()
    for extra, needle in ((["--resume"], "holds results.parquet but no results.jsonl"), ([], "already holds results")):
        r = cpbench(*_sweep(run, "--seq", "32", "--budget-ms", "5"), *extra)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr[-800:]
    assert (run / "results.parquet").read_bytes() == before


def test_resume_reads_an_option_missing_from_an_older_manifest_as_its_default(tmp_path):
    """A manifest written before --swa-pool existed holds no swa_pool: the run was made without it, so a
    resume with --swa-pool would mix rows and is refused."""
    run = tmp_path / "old"
    shutil.copytree(RUNS / "cpu-torch-default", run)
    man = json.loads((run / "manifest.json").read_text())
    assert "swa_pool" not in man["config"]
    man["schema_version"] = SCHEMA_VERSION  # a run of this schema (a schema 2 run is refused by its version)
    (run / "manifest.json").write_text(json.dumps(man))
    r = cpbench("sweep", "--cp", "4", "--bs", "1", "--extend-len", "16", "--out", str(run), "--resume",
                "--budget-ms", "5", "--swa-pool")
    assert r.returncode == 2 and "measured with no --swa-pool, not --swa-pool:" in r.stderr, r.stderr[-800:]


def test_a_byte_order_mark_before_the_first_row_and_the_manifest_is_read_past(tmp_path):
    run = RunDir(tmp_path)
    for i in range(2):
        run.append(_row(i))
    run.results.write_bytes(b"\xef\xbb\xbf" + run.results.read_bytes())  # saved by a Windows editor
    (tmp_path / "manifest.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"config": {"cp_sizes": [4]}}).encode())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "line 1 is not a result row" warning
        assert [r["rank"] for r in read_jsonl(run.results)] == [0, 1]
        assert run.read_manifest()["config"] == {"cp_sizes": [4]}
    run.append(_row(2))
    assert [r["rank"] for r in run.rows()] == [0, 1, 2]


def test_report_plot_compare_of_a_run_a_sweep_still_writes_warn_once(tmp_path, text_reports, undrawn_charts):
    from runfactory import make_run

    run = make_run(tmp_path / "run", fmt="jsonl", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    held = RunDir(run)
    held.lock()
    try:
        for args, what in ((("report", run), "the report covers"), (("plot", run), "the charts cover"),
                           (("compare", run, f"{run}/"), "the comparison covers")):
            r = cpbench(*args)
            assert r.returncode == 0, (args, r.stderr)
            warned = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
            assert len(warned) == 1, r.stderr
            assert warned[0].startswith(f"warning: {run} is still being written by a sweep (pid {os.getpid()} (")
            assert warned[0].endswith(f"): {what} the rows measured so far; run it again when the sweep ends")
    finally:
        held.unlock()
    again = RunDir(run)
    again.lock()  # the readers kept no lock
    again.unlock()
    assert "warning:" not in cpbench("report", run).stderr  # nobody writes it now


def test_a_released_lock_names_no_holder(tmp_path):
    """A finished command leaves ``.lock`` behind (flock needs the file) but empty: it names no process."""
    run = RunDir(tmp_path / "run")
    with run.held():
        assert f"pid {os.getpid()}" in (run.path / RunDir.LOCK).read_text()
    assert (run.path / RunDir.LOCK).read_text() == "" and run.writer() is None


def test_a_reader_checking_for_a_writer_never_stops_a_sweep_from_locking(tmp_path):
    """``writer()`` takes a shared lock for an instant; ``lock()`` waits that out instead of refusing (a
    reader process looping on it once made about 2 % of lock attempts fail)."""
    run = RunDir(tmp_path)
    (tmp_path / RunDir.LOCK).touch()
    code = ("import sys, time; from cpbench.results.store import RunDir; r = RunDir(sys.argv[1]); print(1, flush=True)\n"
            "end = time.monotonic() + 60\nwhile time.monotonic() < end: r.writer()")
    reader = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    try:
        assert reader.stdout.readline().strip() == "1"  # the reader is looping
        for _ in range(2000):
            run.lock()
            run.unlock()
    finally:
        reader.kill()
        reader.wait()


def test_a_cpu_run_without_its_manifest_still_reads_as_a_cpu_run(tmp_path):
    """The message for a corrupt manifest says the results stay readable without it; the rows of a CPU run
    say they ran on a CPU (mem_reason), so the report and compare still make no speedup claim and gate
    no latency."""
    from cpbench.results.verdicts import on_cpu

    shutil.copytree(RUNS / "cpu-torch-default", tmp_path / "run")
    (tmp_path / "run" / "manifest.json").unlink()
    _, manifest = load_run(tmp_path / "run")
    assert on_cpu(manifest)
    _, gpu = load_run(RUNS / "h200-fmha-v2-default-a")
    assert not on_cpu(gpu)


def test_a_table_that_cannot_be_written_keeps_the_run_readable(tmp_path):
    """Attack: a hand-edited `"bs": "one"` made --resume fail in pyarrow with a traceback and leave a 0-byte
    results.parquet, after which report refused the run. Now the parquet is written aside and renamed, and a
    failure leaves results.jsonl as the run's rows, with one warning naming the column."""
    from cpbench.errors import CpbenchWarning

    src = Path(__file__).parent.parent / "docs" / "runs" / "cpu-torch-default"
    rows = [migrate_row(r) for r in RunDir(src).rows()] if RunDir(src).results.exists() else \
        load_run(src)[0].drop(columns=list(DERIVED_COLUMNS), errors="ignore").to_dict("records")
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_tables(rows)  # a readable parquet first
    rows[0] = {**rows[0], "bs": "one"}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run.write_tables(rows)
    assert any(issubclass(w.category, CpbenchWarning) and "column 'bs' holds 'one'" in str(w.message) for w in seen)
    assert not run.parquet.exists() and not list(run.path.glob("*.tmp"))
