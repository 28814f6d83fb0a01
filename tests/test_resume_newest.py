"""`cpbench sweep --resume` without `--out` (#49): it continues the newest unfinished run of the same command in
runs/ and says which, or says in one line that there is none."""

import json
import os

from clirun import cpbench, replacing
from cpbench.results.store import read_jsonl

TINY = ["--layers", "1", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16",
        "--budget-ms", "2", "--timing", "eager", "--no-profile", "--no-report"]
SWEEP = ["sweep", "--cp", "2", "--bs", "1", "--extend-len", "16,32", *TINY]


def _stop_before_the_last_cell(run) -> int:
    """Leave ``run`` as a sweep stopped before its extend-32 cell leaves it; return the rows left."""
    lines = (run / "results.jsonl").read_text().splitlines()
    kept = [x for x in lines if json.loads(x)["max_extend_len"] == 16]
    (run / "results.jsonl").write_text("".join(x + "\n" for x in kept))
    for name in ("results.parquet", "results.csv"):
        (run / name).unlink()
    return len(kept)


def _age(run, seconds_ago: float) -> None:
    """Date every file of ``run`` ``seconds_ago`` (which run is newest goes by its last write)."""
    t = os.path.getmtime(run / "manifest.json") - seconds_ago
    for p in run.iterdir():
        os.utime(p, (t, t))


def test_resume_without_out_continues_the_newest_unfinished_run_of_the_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    for name in ("a", "b", "c"):
        assert cpbench(*SWEEP, "--out", runs / name).returncode == 0
    assert cpbench("sweep", "--cp", "2", "--bs", "2", "--extend-len", "16", *TINY, "--out", runs / "d").returncode == 0
    _stop_before_the_last_cell(runs / "a")  # unfinished, but older than b
    kept = _stop_before_the_last_cell(runs / "b")  # the newest unfinished run of this command
    _stop_before_the_last_cell(runs / "d")  # newer still, but another command (--bs 2)
    for name, ago in (("a", 300), ("b", 200), ("c", 100), ("d", 0)):  # c: finished, newer than b
        _age(runs / name, ago)
    before = {n: (runs / n / "results.jsonl").read_text() for n in "acd"}
    r = cpbench(*SWEEP, "--resume")
    assert r.returncode == 0, r.stderr
    assert ("--resume without --out: resuming runs/b, the newest unfinished run of this command"
            in r.stdout.splitlines()[0]), r.stdout[:500]
    rows = read_jsonl(runs / "b" / "results.jsonl")
    assert len(rows) == 2 * kept and {x["max_extend_len"] for x in rows} == {16, 32}  # finished
    assert {n: (runs / n / "results.jsonl").read_text() for n in "acd"} == before  # the others untouched
    assert sorted(p.name for p in runs.iterdir()) == ["a", "b", "c", "d"]  # no new run directory


def test_resume_without_out_and_no_unfinished_run_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cpbench(*SWEEP, "--resume")
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: --resume without --out: runs holds no run to resume: pass the --out of the sweep to resume, or "
        "drop --resume to start a new run"), r.stderr
    assert not (tmp_path / "runs").exists()
    assert cpbench(*SWEEP, "--out", tmp_path / "runs" / "done").returncode == 0
    r = cpbench(*SWEEP, "--resume")
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: --resume without --out: no unfinished run of this command in runs (1 run there; the newest, "
        "runs/done, is finished): pass --out RUN to resume one, or drop --resume to start a new run"), r.stderr
    r = cpbench(*replacing(SWEEP, "--bs", "1,2"), "--resume")  # another command
    assert r.returncode == 2 and ("the newest, runs/done, was measured with --bs 1, not --bs 1,2)"
                                  in r.stderr), r.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["done"]
