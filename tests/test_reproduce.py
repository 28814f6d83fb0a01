"""A run says how to reproduce it: the environment variables that decided a status, every command of a
resumed run; `cpbench report runs/` (a directory of runs) takes the latest and says so."""

import json
import os
import shutil
import time

import pytest
import torch

from cpbench.report.run_report import without_out
from cpbench.report.run_report import reproduce_lines
from clirun import cpbench
from runfactory import make_run

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16", "--budget-ms", "2"]


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_tflop_limit_that_refused_a_cell_is_in_the_command(tmp_path, no_gpu, text_reports):
    out = tmp_path / "run"
    # a limit of 1e-6 TFLOP per forward: the 16-token cell fits under it, the 512-token cell does not
    r = cpbench("sweep", "--cp", "2", "--bs", "1", "--seq", "16,512", "--out", str(out), *TINY,
                env={"CPBENCH_CPU_TFLOP_LIMIT": "1e-6"})
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {x["max_extend_len"]: x["status"] for x in rows} == {16: "ok", 512: "unsupported"}
    command = json.loads((out / "manifest.json").read_text())["command"]
    assert command.startswith("CPBENCH_CPU_TFLOP_LIMIT=1e-6 cpbench sweep --cp 2")
    shown = without_out(command)  # the report's line writes a new run directory
    assert shown.startswith("CPBENCH_CPU_TFLOP_LIMIT=1e-6 cpbench sweep --cp 2") and "--out" not in shown
    assert f"```sh\n{shown}\n```" in (out / "report.md").read_text()


def test_a_resumed_run_lists_every_command(tmp_path, no_gpu, text_reports):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2", "--bs", "1", "--seq", "16,32", "--out", str(out), *TINY]
    assert cpbench(*args).returncode == 0
    rows = (out / "results.jsonl").read_text().splitlines()  # stopped before its extend-32 cell
    (out / "results.jsonl").write_text("".join(x + "\n" for x in rows if json.loads(x)["max_extend_len"] == 16))
    r = cpbench(*args, "--resume")
    assert r.returncode == 0, r.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert len(man["resumed_by"]) == 1 and man["resumed_by"][0].endswith("--resume")
    text = (out / "report.md").read_text()
    block = text.split("## Reproduce")[1].split("```sh\n")[1].split("\n```")[0].splitlines()
    assert block == [man["command"], man["resumed_by"][0]]
    assert "resumed 1 time;" in text


def test_reproduce_lines_without_resume():
    assert reproduce_lines({"command": "cpbench sweep"}) == ["```sh\ncpbench sweep\n```", ""]
    assert reproduce_lines({})[0].startswith("_The command line was not recorded")


def test_report_of_a_directory_of_runs_takes_the_latest(tmp_path, text_reports):
    runs = tmp_path / "runs"
    old = make_run(runs / "a", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    new = make_run(runs / "b", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    past = time.time() - 100
    for f in old.iterdir():
        os.utime(f, (past, past))
    r = cpbench("report", str(runs))
    assert r.returncode == 0, r.stderr
    assert (new / "report.md").exists() and not (old / "report.md").exists()
    assert "holds 2 runs" in r.stderr and "using the latest" in r.stderr and "others, newest first: a" in r.stderr
    shutil.rmtree(old)  # one run left: no list of others to choose from
    r = cpbench("report", str(runs))
    assert r.returncode == 0 and f"holds 1 run, not results of its own: using it, {new}" in r.stderr.replace("\n", "")
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cpbench("report", str(empty))
    assert r.returncode == 2  # no run inside: the one-line error of a missing run


def test_the_reproduce_line_drops_its_out_so_it_runs_as_pasted():
    from cpbench.report.run_report import reproduce_lines

    cmd = "cpbench sweep --launch torchrun --nproc-per-node 2 --cp 2 --bs 1,4,16 --out runs/h200x2-fa3-torchrun"
    assert without_out(cmd) == "cpbench sweep --launch torchrun --nproc-per-node 2 --cp 2 --bs 1,4,16"
    assert without_out("cpbench sweep --out=r --resume --cp 4") == "cpbench sweep --cp 4"
    assert without_out("cpbench sweep --cp 4") == "cpbench sweep --cp 4"
    assert reproduce_lines({"command": cmd})[0] == "```sh\ncpbench sweep --launch torchrun --nproc-per-node 2 --cp 2 " \
                                                   "--bs 1,4,16\n```"
