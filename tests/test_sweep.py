"""`cpbench sweep` end to end on CPU: run directory, statuses, exit codes, SIGKILL + --resume.

Sweeps run in-process (tests/clirun.py) on a tiny model with a small time budget; the tests that need a real
process (SIGKILL, Ctrl-C) start `python -m cpbench`.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from cpbench.kernels.backends.torch_ref import TorchBackend
from cpbench.results.critical_path import critical_path
from cpbench.results.schema import DERIVED_COLUMNS, KEY_COLUMNS
from cpbench.results.store import RunDir, load_run, read_jsonl
from cpbench.commands.manifest import _union
from cpbench.cli.sweep import run_sweep
from sweepcfg import grid_config, output
from cpbench.errors import CpbenchWarning
from clirun import as_from_a_terminal, cpbench, replacing

TINY = ["--layers", "2", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--page-size", "16"]
QUICK = [*TINY, "--budget-ms", "5", "--timing", "eager"]  # a few samples per row, one timing: enough for what these tests check
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # for the sweeps run as a real process


def test_sweep_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "2,4", "--bs", "1,2", "--seq", "64", "--out", str(out), "--no-report", *QUICK)
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("results.jsonl", "results.parquet", "results.csv", "manifest.json"):
        assert (out / name).stat().st_size > 0
    df, _ = load_run(out)  # the stored measurements with the derived columns
    assert len(df) == 2 * (2 + 4) * 2  # bs x ranks(cp2 + cp4) x modes (eager only on CPU)
    stored = pd.read_parquet(out / "results.parquet")
    assert not set(DERIVED_COLUMNS) & set(stored) and len(stored) == len(df)  # derived on read, never stored
    assert set(df["status"]) == {"ok"}
    assert (df["n_samples"] >= 3).all() and df["samples_us"].map(len).eq(df["n_samples"]).all()
    fused = df[df["mode"] == "fused"]
    assert (fused["diff_vs_two_call"] == 0).all()  # the torch reference: fused == two-call exactly
    assert set(df[df["mode"] == "two-call"]["attn_kernels"]) == {4}  # 2 layers x 2 calls
    assert set(fused["attn_kernels"]) == {2}
    assert (fused["page_table_dup_bytes"] == 2 * fused["page_table_bytes"]).all()
    cp = critical_path(df)
    assert len(cp) == 4 and cp["speedup"].notna().all()
    man = json.loads((out / "manifest.json").read_text())
    assert man["command"].startswith("cpbench sweep") and man["torch"] == torch.__version__
    assert len(man["sweep_wall_s"]) == 1 and man["sweep_wall_s"][0] > 0  # recorded (its size is the machine's)


def test_ineligible_cell_recorded_and_sweep_goes_on(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "4", "--bs", "1", "--seq", "7,64", "--out", str(out), "--no-report", "--nvtx", *QUICK)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = read_jsonl(out / "results.jsonl")
    bad = [x for x in rows if x["max_extend_len"] == 7]
    assert bad and {x["status"] for x in bad} == {"ineligible"} and "2*cp_size = 8" in bad[0]["reason"]
    assert {x["status"] for x in rows if x["max_extend_len"] == 64} == {"ok"}


@pytest.mark.parametrize("args,needle", [
    (["--bs", "0"], "--bs"), (["--bs", ""], "--bs"), (["--seq", "7"], "no cell can run"),
    (["--timing", "warp"], "--timing"), (["--timing", "graph"], "CUDA"), (["--cp", "4", "--ranks", "4"], "--ranks"),
    (["--model", "gpt-9"], "unknown model"), (["--page-size", "48"], "page size"), (["--prefix", "-1"], "--prefix"),
    (["--seq", "64", "--context-len", "32"], "--context-len"),
    (["--seq-lens", "64,96", "--bs", "2"], "--seq-lens gives the whole batch"),
    (["--seq-lens", "64,96", "--seq", "64"], "--seq-lens gives the whole batch"), (["--seq", ""], "--seq"),
    (["--bs", "100000000"], "--bs values must be <= 65536"), (["--prefix", "999999999999999999999999"], "--prefix"),
    (["--window", "99999999999999999999"], "--window must be <="),
])
def test_bad_input_one_line_exit_2(tmp_path, args, needle):
    r = cpbench("sweep", "--out", str(tmp_path / "r"), "--no-report", *replacing(TINY, *args))
    assert r.returncode == 2, r.stdout[-500:] + r.stderr[-500:]
    assert "Traceback" not in r.stderr and needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "results.jsonl").exists()


def test_oom_cell_recorded_and_sweep_goes_on(tmp_path):
    out = tmp_path / "run"
    # --page-size 256, not QUICK's 16: the big cell's page tables hold 4M pages, not 64M, whose seeded
    # permutation took most of the test before the allocation it checks
    r = cpbench("sweep", "--cp", "2", "--bs", "64", "--seq", "64,16777216", "--out", str(out), "--no-report",
                *replacing(QUICK, "--page-size", "256"), "--max-prefill-tokens", "0",
                env={"CPBENCH_CPU_TFLOP_LIMIT": "1e30"})  # let it reach the allocation
    assert r.returncode == 0 and "Traceback" not in r.stderr
    rows = read_jsonl(out / "results.jsonl")
    assert {x["status"] for x in rows if x["max_extend_len"] == 64} == {"ok"}
    big = [x for x in rows if x["max_extend_len"] == 16777216]  # 1e9 tokens: q alone would be 256 GB
    assert len(big) == 4 and {x["status"] for x in big} == {"oom"} and "allocate" in big[0]["reason"]


def test_out_is_a_file_or_unwritable(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for target in (f, f / "sub"):
        r = cpbench("sweep", "--out", str(target), "--seq", "64", "--bs", "1", *QUICK)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "--out" in r.stderr or "cannot write" in r.stderr


def test_unsupported_backend_exits_2_before_making_a_run_directory(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--backend", "flashinfer-fa3", "--bs", "1", "--seq", "64", "--out", str(out), "--device", "cpu",
                *QUICK)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "backend flashinfer-fa3 cannot run here" in r.stderr and "CUDA" in r.stderr
    assert not out.exists()


def test_mismatch_exit_code(tmp_path, monkeypatch):
    real = TorchBackend.prepare

    def broken(self, work, mode):
        prep = real(self, work, mode)
        if mode == "fused":
            fwd = prep.forward
            prep.forward = lambda: (fwd(), [o.add_(1.0) for o in prep.outputs.values()])
        return prep

    monkeypatch.setattr(TorchBackend, "prepare", broken)
    code = run_sweep(grid_config(), output(tmp_path / "a"))
    rows = read_jsonl(tmp_path / "a" / "results.jsonl")
    assert code == 1 and {x["status"] for x in rows if x["mode"] == "fused"} == {"mismatch"}
    assert {x["status"] for x in rows if x["mode"] == "two-call"} == {"ok"}
    assert run_sweep(grid_config(), output(tmp_path / "b", allow_mismatch=True)) == 0


def test_a_resume_fails_on_the_mismatch_rows_of_earlier_invocations(tmp_path, monkeypatch, capsys):
    """The exit code reflects every row of the run directory: a --resume that completes a run with earlier
    mismatch rows, measuring only rows that pass, still exits 1 (and says how many rows came before)."""
    real = TorchBackend.prepare

    def broken(self, work, mode):
        prep = real(self, work, mode)
        if mode == "fused":
            fwd = prep.forward
            prep.forward = lambda: (fwd(), [o.add_(1.0) for o in prep.outputs.values()])
        return prep

    monkeypatch.setattr(TorchBackend, "prepare", broken)
    run = tmp_path / "run"
    assert run_sweep(grid_config(extend_len_list=(64, 128)), output(run)) == 1
    monkeypatch.setattr(TorchBackend, "prepare", real)
    lines = (run / "results.jsonl").read_text().splitlines()  # the sweep stopped before its extend-128 cell
    (run / "results.jsonl").write_text("".join(x + "\n" for x in lines if json.loads(x)["max_extend_len"] == 64))
    capsys.readouterr()
    assert run_sweep(grid_config(extend_len_list=(64, 128)), output(run, resume=True)) == 1
    assert "2 row(s) failed the correctness check, 2 of them written before this resume" in capsys.readouterr().out
    rows = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert {x["status"] for x in rows if x["max_extend_len"] == 128} == {"ok"}
    assert run_sweep(grid_config(extend_len_list=(64, 128)), output(run, resume=True, allow_mismatch=True)) == 0


@pytest.mark.slow
def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2,4", "--bs", "1,2", "--seq", "64,128", "--out", str(out), "--no-report", *TINY,
            "--budget-ms", "20", "--timing", "eager"]
    proc = subprocess.Popen([sys.executable, "-m", "cpbench", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=ENV)
    path = out / "results.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and (not path.exists() or len(path.read_text().splitlines()) < 10):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    assert 10 <= len(before) < 48, "the sweep should have been killed mid-way"
    r = cpbench(*args, "--resume")  # in-process: only the killed sweep needs a real process
    assert r.returncode == 0, r.stderr[-2000:]
    after = read_jsonl(path)
    keys = [tuple(str(x.get(c)) for c in KEY_COLUMNS) for x in after]
    assert len(keys) == len(set(keys)) == 48  # 2 bs x 2 seq x (2 + 4 ranks) x 2 modes
    assert after[:len(before)] == before  # rows measured before the kill are untouched
    assert len(pd.read_parquet(out / "results.parquet")) == 48
    man = json.loads((out / "manifest.json").read_text())
    assert len(man["sweep_wall_s"]) == 2 and len(man["resumed_by"]) == 1  # the killed run kept its time
    assert all(w > 0 for w in man["sweep_wall_s"])


def test_resume_with_other_options_refused(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2", "--bs", "1", "--seq", "64", "--out", str(out), "--no-report", *QUICK]
    assert cpbench(*args).returncode == 0
    r = cpbench(*args, "--resume", "--dtype", "fp16")
    assert r.returncode == 2 and "measured with --dtype bf16, not --dtype fp16:" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cpu_refuses_cells_too_big_for_the_reference(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "4", "--bs", "1", "--seq", "64,10000000", "--out", str(out), "--no-report", *QUICK)
    assert r.returncode == 0
    big = [x for x in read_jsonl(out / "results.jsonl") if x["max_extend_len"] == 10000000]
    assert big and {x["status"] for x in big} == {"unsupported"} and "TFLOP" in big[0]["reason"]


@pytest.mark.parametrize("args,needle", [
    (["--out", ""], "--out is empty"), (["--seq-lens", ""], "--seq-lens is empty"),
    (["--budget-ms", "nan"], "finite"), (["--seed", "99999999999999999999"], "--seed"), (["--timing", ""], "--timing"),
])
def test_empty_or_nonfinite_options(args, needle):
    r = cpbench("sweep", *args, *TINY)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_torn_last_line_then_resume_keeps_every_row(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2", "--bs", "1", "--seq", "32", "--out", str(out), "--no-report", *QUICK]
    assert cpbench(*args).returncode == 0
    path = out / "results.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # killed mid-write: the last row is torn, no newline
    r = cpbench(*args, "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in path.read_text().splitlines()]  # every line parses
    assert len(rows) == 4 and len({(x["rank"], x["mode"]) for x in rows}) == 4
    assert len(pd.read_parquet(out / "results.parquet")) == 4


def test_stale_parquet_after_an_interrupted_resume_is_not_read(tmp_path):
    out = tmp_path / "run"
    assert cpbench("sweep", "--cp", "2", "--bs", "1", "--seq", "32", "--out", str(out), "--no-report", *QUICK).returncode == 0
    extra = [{**x, "bs": 2} for x in read_jsonl(out / "results.jsonl")]  # rows a resumed sweep wrote before a kill
    for x in extra:
        RunDir(out).append(x)
    with pytest.warns(CpbenchWarning, match="holds 8 rows, results.parquet 4"):
        df, _ = load_run(out)
    assert len(df) == 8 and set(df["bs"]) == {1, 2}


def test_a_resume_with_another_grid_is_refused_and_adds_nothing(tmp_path):
    """#49: ``--resume --bs 1,2`` of a finished ``--bs 2`` run silently measured bs 1 into it; it is refused in one
    line naming both lists, exit 2, and the run is left as it was."""
    out = tmp_path / "run"
    base = ["sweep", "--cp", "2", "--extend-len", "32", "--out", str(out), "--no-report", *QUICK]
    assert cpbench(*base, "--bs", "2").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    r = cpbench(*base, "--bs", "1,2", "--resume")
    assert r.returncode == 2 and r.stderr.strip() == (f"error: --resume: {out} was measured with --bs 2, not --bs 1,2: "
                                                      "resume with the same options or pick another --out"), r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"} == before
    assert _union([1, 16], [4]) == [1, 4, 16] and _union([[1]], [1]) == [1, [1]]  # a manifest grown before the refusal


def test_a_mode_whose_first_forward_fails_leaves_the_other_mode_measured(tmp_path, monkeypatch):
    real = TorchBackend.prepare

    def fused_fails(self, work, mode):
        prep = real(self, work, mode)
        if mode == "fused" and work.geometry.rank == 0:
            def boom():
                raise RuntimeError("simulated kernel failure")
            prep.forward = boom
        return prep

    monkeypatch.setattr(TorchBackend, "prepare", fused_fails)
    code = run_sweep(grid_config(profile=True), output(tmp_path / "a"))
    status = {(x["rank"], x["mode"]): (x["status"], x["reason"]) for x in read_jsonl(tmp_path / "a" / "results.jsonl")}
    assert status[(0, "fused")] == ("error", "RuntimeError: simulated kernel failure")
    assert status[(0, "two-call")][0] == status[(1, "fused")][0] == status[(1, "two-call")][0] == "ok"
    assert code == 1  # a backend that raises is a crash, not an expected status: the sweep fails at its end
    # the traceback is kept, one file per cell, rank and mode, naming where the exception was raised
    (tb,) = (tmp_path / "a" / "errors").iterdir()
    assert tb.name == "cp2_bs1_extend64-r0-fused.txt"
    text = tb.read_text()
    assert text.startswith("# torch eager pass 1: RuntimeError: simulated kernel failure\n")
    assert "Traceback (most recent call last)" in text and "in boom" in text
    assert run_sweep(grid_config(profile=True), output(tmp_path / "b", keep_going=True)) == 0
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "errors").write_text("a file where the tracebacks go")
    with pytest.warns(CpbenchWarning, match="cannot write the traceback of an error row"):
        assert run_sweep(grid_config(profile=True), output(tmp_path / "c")) == 1  # the sweep goes on
    assert len(read_jsonl(tmp_path / "c" / "results.jsonl")) == 4  # and keeps every row


@pytest.mark.slow
def test_ctrl_c_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "cpbench", "sweep", "--cp", "2,4", "--bs", "1,2", "--seq", "64,128",
                             "--out", str(out), "--no-report", *TINY, "--budget-ms", "20"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=as_from_a_terminal)
    deadline = time.time() + 240
    results = out / "results.jsonl"
    while time.time() < deadline and not (results.exists() and results.stat().st_size > 0):  # a row is on disk
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err[-1500:])
    assert f"the rows measured so far are in {out}; to finish the run: cpbench sweep " in err, err[-1500:]
    assert err.strip().endswith(f"--out {out} --resume") and len(err.strip().splitlines()) == 1
    assert read_jsonl(out / "results.jsonl")  # rows measured before Ctrl-C are on disk


def test_resume_checks_the_rows_when_the_manifest_is_gone(tmp_path):
    out = tmp_path / "run"
    base = ["sweep", "--cp", "2", "--bs", "1", "--seq", "32", "--out", str(out), "--no-report", *QUICK]
    assert cpbench(*base).returncode == 0
    (out / "manifest.json").unlink()
    r = cpbench(*replacing(base, "--layers", "8"), "--resume")  # another model
    assert r.returncode == 2 and "holds rows measured with model 'gpt-oss-120b+layers2" in r.stderr, r.stderr
    r = cpbench(*base, "--dtype", "fp32", "--resume")
    assert r.returncode == 2 and "dtype 'bf16'" in r.stderr, r.stderr
    assert len(read_jsonl(out / "results.jsonl")) == 4  # nothing was added


def test_resume_of_a_sweep_stopped_before_its_first_row(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2", "--bs", "1", "--seq", "32", "--out", str(out), "--no-report", *QUICK]
    assert cpbench(*args).returncode == 0
    (out / "results.jsonl").unlink()
    (out / "results.parquet").unlink()
    r = cpbench(*args, "--resume")  # only manifest.json was there, as after an early Ctrl-C
    assert r.returncode == 0, r.stderr
    assert len(read_jsonl(out / "results.jsonl")) == 4


def test_fused_order_sweep_rows_equal_two_call(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "2", "--bs", "2", "--seq", "32", "--fused-order", "interleaved", "--out", str(out),
                "--no-report", *QUICK)
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_parquet(out / "results.parquet")
    assert set(df["fused_order"]) == {"interleaved"} and len(df) == 2 * 2
    fused = df[df["mode"] == "fused"]
    assert (fused["diff_vs_two_call"] == 0).all() and (fused["max_abs_err"] < 2e-2).all()  # bf16 tolerance
    assert set(fused["attn_kernels"]) == {2}  # still one call per layer (2 layers)
    bad = cpbench("sweep", "--cp", "2", "--bs", "1", "--seq", "32", "--fused-order", "reverse", "--out",
                  str(tmp_path / "bad"), *QUICK)
    assert bad.returncode == 2 and "--fused-order" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_an_interrupted_sweep_prints_the_command_that_finishes_it_and_that_command_does(tmp_path, monkeypatch):
    """Ctrl-C mid-sweep: one line naming the run directory and the exact resume command; run as printed (its
    --out and --resume added), it finishes the run with every row once."""
    import shlex

    import cpbench.commands.runner as runner

    out = tmp_path / "run"
    real, calls = runner.measure_rank, []

    def interrupted_on_the_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(runner, "measure_rank", interrupted_on_the_third)
    args = ["sweep", "--cp", "2", "--bs", "1,2", "--seq", "32", "--no-report", *QUICK, "--out", str(out)]
    r = cpbench(*args)
    assert r.returncode == 130 and str(out) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    command = r.stderr.strip().split("to finish the run: ", 1)[1]
    assert command.startswith("cpbench sweep ") and command.endswith(f"--out {out} --resume")
    monkeypatch.setattr(runner, "measure_rank", real)
    again = cpbench(*shlex.split(command)[1:])
    assert again.returncode == 0, again.stderr[-2000:]
    keys = [(x["bs"], x["rank"], x["mode"]) for x in read_jsonl(out / "results.jsonl")]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 2 * 2 * 2  # bs x ranks x modes, once each


def test_a_sweep_interrupted_before_its_run_directory_says_nothing_was_written(tmp_path, monkeypatch):
    import cpbench.api as api

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "sweep", interrupted)
    r = cpbench("sweep", "--cp", "2", "--bs", "1", "--seq", "32", "--no-report", *QUICK, "--out", str(tmp_path / "run"))
    assert r.returncode == 130 and r.stderr == ("interrupted: the sweep had not made its run directory yet, nothing "
                                                "was written; rerun the same command\n")
