"""Faults of a real torchrun launch on CPU (gloo), injected with CPBENCH_INJECT_FAULT: a rank that stops
answering (SIGSTOP), a rank out of memory in one cell, and torchrun's agent killed. Each test is bounded by
a pytest timeout (never by a wall-clock assert) and checks which rows are on disk afterwards."""

import os
import signal
import subprocess
import sys
import time

import pytest

from cpbench.ranks import faults
from cpbench.ranks.launch import failure_summary
from cpbench.results.store import RunDir
from cpbench.errors import CpbenchInputError
from test_dist_sweep import SMALL, _env, _processes_mentioning, assert_resumable, by_key, sweep

LAUNCH = ["--launch", "torchrun", "--nproc-per-node", "2", "--cp", "2", "--bs", "1", "--no-profile"]


def _gone(marker: str, within_s: float = 30.0) -> list[str]:
    """Processes still mentioning ``marker`` after waiting up to ``within_s`` for them to end."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and _processes_mentioning(marker):
        time.sleep(0.5)
    return _processes_mentioning(marker)


@pytest.mark.parametrize("spec, want", [
    ("", []), ("1:raise", [(1, "raise", None, "prepare")]), ("0:oom:2:forward", [(0, "oom", 2, "forward")]),
    ("3:stop:*:prepare", [(3, "stop", None, "prepare")]), ("1:exit:2", [(1, "exit", 2, "prepare")]),
    ("1:raise:1, 1:oom:2:forward", [(1, "raise", 1, "prepare"), (1, "oom", 2, "forward")]),
])
def test_fault_spec_is_parsed(spec, want):
    assert faults.parse(spec) == want


@pytest.mark.parametrize("spec", ["x:raise", "1:explode", "1:raise:0", "1:raise:1:later", "1:raise:1:forward:9",
                                  "1:raise,", "1:raise,1:explode"])
def test_a_malformed_fault_spec_is_refused_in_one_line(spec):
    with pytest.raises(CpbenchInputError, match="is not <rank>:<fault>") as e:
        faults.parse(spec)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("spec, world, valid", [("5:raise", 2, "ranks 0..1"), ("2:oom:1:forward", 2, "ranks 0..1"),
                                                 ("1:exit", 1, "rank 0")])
def test_a_fault_naming_a_rank_outside_the_launch_is_refused(spec, world, valid):
    with pytest.raises(CpbenchInputError) as e:
        faults.parse(spec, world_size=world)
    rank = spec.split(":")[0]
    assert str(e.value) == (f"CPBENCH_INJECT_FAULT={spec!r} names rank {rank}, but the launch has only {valid}: "
                            f"name one of {valid}")
    assert faults.parse(f"{world - 1}:raise", world_size=world) == [(world - 1, "raise", None, "prepare")]


def test_a_sweep_with_a_fault_on_a_rank_it_does_not_have_ends_before_the_launch(tmp_path):
    """Checked by the launcher, before torchrun starts: one line, exit 2, no run directory."""
    from clirun import cpbench

    out = tmp_path / "run"
    r = cpbench("sweep", "--device", "cpu", *LAUNCH, "--timing", "eager", "--seq", "40", *SMALL, "--out", out,
                env={"CPBENCH_INJECT_FAULT": "5:raise"})
    assert r.returncode == 2 and r.stderr.strip() == ("error: CPBENCH_INJECT_FAULT='5:raise' names rank 5, but the "
                                                      "launch has only ranks 0..1: name one of ranks 0..1"), r.stderr
    assert not out.exists()


def test_the_agent_wait_is_10_s_unless_set_and_a_bad_value_is_refused(monkeypatch):
    from cpbench.ranks.launch import AGENT_WAIT_ENV, AGENT_WAIT_S, agent_wait_s

    monkeypatch.delenv(AGENT_WAIT_ENV, raising=False)
    assert agent_wait_s() == AGENT_WAIT_S == 10.0
    monkeypatch.setenv(AGENT_WAIT_ENV, "2.5")
    assert agent_wait_s() == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv(AGENT_WAIT_ENV, bad)
        with pytest.raises(CpbenchInputError, match=f"CPBENCH_AGENT_WAIT_S='{bad}' is not a number of seconds"):
            agent_wait_s()


def test_a_killed_agent_is_named_not_blamed_on_a_rank():
    assert failure_summary("", -9) == "torchrun was killed by SIGKILL; its ranks were stopped"


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_a_stopped_rank_ends_the_launch_naming_it_and_leaves_a_resumable_run(tmp_path):
    out = tmp_path / "stop"
    args = [*LAUNCH, "--timing", "eager", "--seq", "40,48,56", "--out", out, *SMALL[:-2], "--dist-timeout", "5"]
    p = sweep(*args, env=_env(CPBENCH_INJECT_FAULT="1:stop:2"), timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert err[0].startswith("error: rank 1 stopped answering (its process was stopped): rank 0 gave up waiting")
    assert "--dist-timeout 5 s" in err[0] and "rerun the same command with --resume" in err[0]
    assert _gone(str(out)) == []  # the stopped rank was killed too
    kept = RunDir(out).rows()
    assert sorted((r["max_extend_len"], r["rank"]) for r in kept) == [(40, 0), (40, 0), (40, 1), (40, 1)]
    assert_resumable(out)  # a resume after a stop runs in test_stopping_the_launcher_...[sigkill]


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_a_raise_or_an_oom_on_one_rank_records_the_cell_on_every_rank_and_the_sweep_goes_on(tmp_path):
    """Three faults in one launch, each in its own cell: a RuntimeError while preparing, an OOM while
    preparing, an OOM in the first forward (after the other layers' gathers ran); the fourth cell runs."""
    # the default --dist-timeout (300 s) is longer than the pytest timeout: a rank left waiting fails the test
    out = tmp_path / "faults"
    p = sweep(*LAUNCH, "--timing", "eager", "--seq", "40,48,56,64", "--out", out, *SMALL[:-2],
              env=_env(CPBENCH_INJECT_FAULT="1:raise:1,1:oom:2:prepare,1:oom:3:forward"), timeout=140)
    assert p.returncode == 1, p.stderr[-2000:]  # the raise is an error row: the sweep goes on, then fails
    # rank 1's process wrote the traceback of its raise; rank 0 met the failure in an agreement and has none
    assert sorted(f.name for f in (out / "errors").iterdir()) == ["cp2_bs1_extend40-r1-fused.txt",
                                                                   "cp2_bs1_extend40-r1-two-call.txt"]
    assert "injected fault on rank 1" in (out / "errors" / "cp2_bs1_extend40-r1-fused.txt").read_text()
    rows = by_key(RunDir(out).rows())
    assert len(rows) == 16
    for seq, status, reason in ((40, "error", "injected fault on rank 1"), (48, "oom", "injected oom on rank 1"),
                                (56, "oom", "injected oom on rank 1"), (64, "ok", None)):
        for rank in (0, 1):
            for mode in ("two-call", "fused"):
                r = rows[(2, 1, seq, rank, mode)]
                assert r["status"] == status and (reason is None or reason in r["reason"]), r
        if reason:
            assert rows[(2, 1, seq, 0, "fused")]["reason"].startswith("rank 1: ")


def _agent_of(launcher_pid: int) -> int | None:
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    for ln in out.splitlines()[1:]:
        pid, ppid, cmd = ln.split(None, 2)
        if int(ppid) == launcher_pid and "torch.distributed.run" in cmd:
            return int(pid)
    return None


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_killing_the_agent_stops_every_rank_and_leaves_a_resumable_run(tmp_path):
    out = tmp_path / "agent"
    args = [*LAUNCH, "--timing", "eager", "--seq", ",".join(str(32 + 8 * i) for i in range(6)), "--out", out, *SMALL[:-2],
            "--dist-timeout", "20"]
    p = subprocess.Popen([sys.executable, "-m", "cpbench", "sweep", *map(str, args)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while len(RunDir(out).rows()) < 4 and p.poll() is None:  # the first cell is on disk
        time.sleep(0.2)
    agent = _agent_of(p.pid)
    assert agent is not None, p.stderr.read() if p.poll() is not None else "no torchrun agent"
    os.kill(agent, signal.SIGKILL)
    p.wait(timeout=60)
    err = [ln for ln in p.stderr.read().splitlines() if ln.strip()]
    assert p.returncode == 1 and len(err) == 1, err
    assert err[0].startswith("error: torchrun was killed by SIGKILL; its ranks were stopped")
    assert _gone(str(out)) == []  # no rank goes on measuring with nobody watching
    kept = RunDir(out).rows()
    n = len(kept)
    time.sleep(2)
    assert len(RunDir(out).rows()) == n and n % 4 == 0 and 4 <= n < 24  # whole cells, and no more after
    assert_resumable(out)


def test_a_fault_rank_in_non_ascii_digits_is_refused_in_one_line():
    """str.isdigit() accepts '²'; the parser takes ASCII digits only, so int() never sees it."""
    from cpbench.errors import CpbenchInputError
    from cpbench.ranks.faults import parse

    for text in ("²:raise", "1:raise:²"):
        with pytest.raises(CpbenchInputError):
            parse(text)


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_a_torchrun_profile_records_a_cell_that_failed_on_a_rank_and_profiles_the_rest(tmp_path):
    """An OOM on rank 1 in the first cell: profile.json records that cell as oom (the reason names rank 1)
    and counts the second cell's attention calls on both ranks. A second profile into the same --out is
    refused before anything runs: the first one's profile.json is kept."""
    import json

    from clirun import cpbench

    out = tmp_path / "prof"
    args = ["--launch", "torchrun", "--nproc-per-node", "2", "--cp", "2", "--seq", "40,48", "--device", "cpu",
            *SMALL[:10], "--out", out]
    p = subprocess.run([sys.executable, "-m", "cpbench", "profile", *map(str, args)], capture_output=True, text=True,
                       env=_env(CPBENCH_INJECT_FAULT="1:oom:1"), timeout=140)
    assert p.returncode == 0, p.stderr[-2000:]
    cells = json.loads((out / "profile.json").read_text())["cells"]
    assert [(c["max_extend_len"], c["status"]) for c in cells] == [(40, "oom"), (48, "ok")]
    assert cells[0]["reason"].startswith("rank 1: ") and "injected oom on rank 1" in cells[0]["reason"]
    assert cells[0]["per_rank"] == [] and cells[0]["total"] is None
    by = {(r["rank"], r["mode"]): r["attn_kernels"] for r in cells[1]["per_rank"]}
    assert by == {(0, "two-call"): 4, (0, "fused"): 2, (1, "two-call"): 4, (1, "fused"): 2}  # 2 layers, 2 or 1 calls
    assert (cells[1]["total"]["two-call"], cells[1]["total"]["fused"]) == (8, 4)
    before = (out / "profile.json").read_text()
    again = cpbench("profile", *args)
    assert again.returncode == 2 and again.stderr.strip() == (
        f"error: {str(out / 'profile.json')!r} holds an earlier result: pick another --out, or move that file away "
        "to write a new one here"), again.stderr
    assert (out / "profile.json").read_text() == before
    (out / "profile.json").unlink()  # as a profile killed in its first cell leaves it: its traces alone
    again = cpbench("profile", *args)
    assert again.returncode == 2 and "holds traces of an earlier profile that did not finish" in again.stderr


@pytest.mark.parametrize("spec, extra, needle", [
    ("1:raise:3", (), "names cell 3, but the sweep plans 2 cell(s): name a cell in 1..2, or * for every cell"),
    ("1:oom:1:forward", ("--gather", "none"), "fires before a layer's K|V all-gather, and --gather none runs none"),
    ("1:raise:1", ("--cp", "1,2"), "names rank 1, which measures no part of cell 1 (cp_size 1: ranks 0..0)"),
    ("1:raise", ("--cp", "1"), "names rank 1, which measures no part of any cell"),
    ("1:raise", ("--launch", "simulated"), "has no effect on a simulated launch: add --launch torchrun, or unset it"),
])
def test_a_fault_that_could_never_fire_is_refused_before_the_launch(tmp_path, spec, extra, needle):
    """A fault test must not pass by injecting nothing: a cell beyond the plan, or a forward fault with no
    gather to fire before, is an input error (one line, exit 2) before torchrun starts."""
    from clirun import cpbench

    from clirun import replacing

    out = tmp_path / "run"
    r = cpbench("sweep", "--device", "cpu", *replacing([*LAUNCH, "--timing", "eager", "--seq", "40,48", *SMALL], *extra), "--out", out,
                env={"CPBENCH_INJECT_FAULT": spec})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert not out.exists()


def test_a_torchrun_sweep_into_a_file_or_a_resume_without_a_manifest_file_ends_before_the_launch(tmp_path):
    """Both were found by rank 0 after torchrun had started both ranks (about 11 s); the second one was
    reported as a failed rank (exit 1) with advice to resume, which would fail again."""
    from clirun import cpbench

    afile = tmp_path / "afile"
    afile.write_text("x")
    r = cpbench("sweep", "--device", "cpu", *LAUNCH, "--timing", "eager", "--seq", "40", *SMALL, "--out", afile)
    assert r.returncode == 2 and r.stderr.strip() == f"error: --out {str(afile)!r} is a file: pass a directory path"
    run = tmp_path / "run"
    (run / "manifest.json").mkdir(parents=True)
    r = cpbench("sweep", "--device", "cpu", *LAUNCH, "--timing", "eager", "--seq", "40", *SMALL, "--out", run, "--resume")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{str(run / 'manifest.json')!r} is not a file: move it away" in r.stderr


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_a_stopped_agent_does_not_hang_the_launch_once_its_ranks_ended(tmp_path):
    """Attack: `kill -STOP` of torchrun's agent: the ranks wrote every row and rank 0 its exit code, but the
    launcher waited for the stopped agent for ever. It is now killed AGENT_WAIT_S after its ranks ended
    (CPBENCH_AGENT_WAIT_S: 1 s here instead of the default 10 s, which the test would only wait out)."""
    out = tmp_path / "stopped-agent"
    args = [*LAUNCH, "--timing", "eager", "--extend-len", "32,40", "--out", out, *SMALL[:-2], "--dist-timeout", "20"]
    p = subprocess.Popen([sys.executable, "-m", "cpbench", "sweep", *map(str, args)],
                         env=_env(CPBENCH_AGENT_WAIT_S="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while len(RunDir(out).rows()) < 4 and p.poll() is None:  # the ranks are running: the first cell is on disk
        time.sleep(0.1)
    agent = _agent_of(p.pid)
    assert agent is not None, "no torchrun agent"
    os.kill(agent, signal.SIGSTOP)  # the ranks go on: they are the agent's children, not stopped with it
    try:
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.kill(agent, signal.SIGKILL)
            p.kill()
    err = p.stderr.read()
    assert p.returncode == 0, err[-1500:]
    assert "torchrun's agent did not exit after its ranks ended (stopped?); it was killed 1 s later" in err
    assert len(RunDir(out).rows()) == 8 and all(r["status"] == "ok" for r in RunDir(out).rows())
