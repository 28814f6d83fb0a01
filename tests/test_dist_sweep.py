"""Real torchrun launches on CPU (gloo, the torch reference): distributed == simulated, rows written
once by rank 0, the critical path is the per-sample maximum over ranks, and a failing or dying rank
ends its cell (or the launch) with status rows instead of a hang. Every test has a pytest timeout."""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cpbench.results.store import RunDir
from clirun import as_from_a_terminal, cpbench, replacing

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).parent / "dist_scripts"
SMALL = ["--backend", "torch", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--dtype", "fp32",
         "--budget-ms", "5", "--no-report", "--dist-timeout", "30"]


def _env(**extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), **extra}
    env.pop("CPBENCH_INJECT_FAULT", None)
    env.pop("CPBENCH_AGENT_WAIT_S", None)
    env.update(extra)
    return env


def sweep(*args, env=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpbench", "sweep", *map(str, args)], capture_output=True,
                          text=True, env=env or _env(), timeout=timeout)


def assert_resumable(out: Path) -> None:
    """What a --resume of ``out`` needs after a launch ended by a fault: no process holds the directory's
    lock, and the rows on disk read back whole (a resume after a stop runs in
    test_stopping_the_launcher_...[sigkill])."""
    with RunDir(out).held():
        rows = RunDir(out).rows()
    assert rows and all(r["status"] == "ok" for r in rows) and len(by_key(rows)) == len(rows)


def by_key(rows):
    return {(r["cp_size"], r["bs"], r["max_extend_len"], r["rank"], r["mode"]): r for r in rows}


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_outputs_with_the_all_gather_equal_the_simulated_outputs_bit_for_bit():
    """Both gather modes, and the packed one with --swa-pool, in one launch (2 batches x 2 modes x 2 ranks
    each); with the SWA pool the window layers' gathered K|V must land in it, at its table's slots."""
    entries = ["packed", "separate", "packed+swa-pool"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(SCRIPTS / "outputs_check.py"), ",".join(entries)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["world_size"] == 2 and len(out["equal"]) == 8 * len(entries), out
    assert all(out["equal"].values()), out
    assert {k.split()[0] for k in out["equal"]} == set(entries)


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_torchrun_sweep_matches_the_simulated_sweep_and_resumes_on_its_thread_count_only(tmp_path):
    """One torchrun sweep of four processes at cp_size 2 and 4, compared with the same sweep simulated (in
    this process: the process boundary is the torchrun one's); cp_size 2 runs on ranks 0 and 1 while ranks 2
    and 3 sit the cell out. Then a --resume of it on another intra-op thread count is refused."""
    # --rel-ci 0.5 with up to 2 s per variant: the --rel-ci stopping check (an agreement across ranks) runs from
    # its 20th sample and stops there once the ranks agree that the interval is within 50 % of the median, which
    # CPU noise meets; a machine too busy for 20 samples in 2 s stops at the budget instead
    common = ["--cp", "2,4", "--bs", "1", "--seq", "40", "--timing", "eager", *replacing(SMALL, "--budget-ms", "2000"),
              "--rel-ci", "0.5"]
    launch = ["--launch", "torchrun", "--nproc-per-node", "4", "--out", tmp_path / "d"]
    dist = sweep(*launch, *common, timeout=200)
    assert dist.returncode == 0, dist.stderr[-2000:]
    # OMP_NUM_THREADS=1, as for the ranks (conftest); SMALL's 5 ms budget: no sample of the simulated twin is
    # compared below (its outputs and counts are), and its 6 ranks x 2 modes would take 400 ms each
    sim = cpbench("sweep", "--out", tmp_path / "s", *replacing(common, "--budget-ms", "5"))
    assert sim.returncode == 0, sim.stderr[-2000:]
    d_rows, s_rows = RunDir(tmp_path / "d").rows(), RunDir(tmp_path / "s").rows()
    # (2 + 4 ranks) x 2 modes, each written once (rank 0 only)
    assert len(d_rows) == len(s_rows) == len(by_key(d_rows)) == 12
    d, s = by_key(d_rows), by_key(s_rows)
    assert d.keys() == s.keys()  # the same cells and ranks: cp_size 2 on ranks 0 and 1 only
    derived = by_key(RunDir(tmp_path / "d").load()[0].to_dict("records"))  # columns derived over ranks on read
    for k in s:
        assert d[k]["status"] == s[k]["status"] == "ok"
        assert (d[k]["launch"], d[k]["world_size"], d[k]["gather"]) == ("torchrun", 4, "packed")
        assert (s[k]["launch"], s[k]["world_size"], s[k]["gather"]) == ("simulated", 1, "none")
        # the same fp32 outputs: the same error against the reference, the same fused-vs-two-call diff
        assert d[k]["max_abs_err"] == s[k]["max_abs_err"]
        assert d[k].get("diff_vs_two_call") == s[k].get("diff_vs_two_call")
        assert d[k]["attn_kernels"] == s[k]["attn_kernels"] == 2 * (2 if k[4] == "two-call" else 1)
        assert d[k]["steps_per_layer"] == s[k]["steps_per_layer"] + 2  # gather + kv_write before attention
        assert d[k]["gather_bytes"] > 0 and d[k]["gather_us"] > 0 and derived[k]["wait_us"] >= 0
    for (cp, bs, seq, rank, mode), r in d.items():  # the cell's ranks ran the same agreed samples
        ranks = [d[(cp, bs, seq, other, mode)] for other in range(cp)]
        assert {len(o["samples_us"]) for o in ranks} == {len(r["samples_us"])} and len(r["samples_us"]) >= 5
        assert {o["stop_reason"] for o in ranks} == {r["stop_reason"]} <= {"precision", "time budget"}
        if r["stop_reason"] == "precision":  # the stopping check runs from MIN_STOP_SAMPLES samples on
            assert len(r["samples_us"]) >= 20
        want = statistics.median(max(sample) for sample in zip(*(o["samples_us"] for o in ranks)))
        assert derived[(cp, bs, seq, rank, mode)]["critical_us_median"] == pytest.approx(want, abs=1e-6)
    m = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert m["config"]["launch"] == "torchrun" and m["config"]["world_size"] == 4 and m["config"]["gather"] == "packed"
    assert m["cpu_threads"] == 1
    # refused by the launcher before any rank starts (in this process: no torchrun is run)
    again = cpbench("sweep", *launch, *common, "--resume", env={"OMP_NUM_THREADS": "2"})
    assert again.returncode == 2, again.stderr[-2000:]
    assert again.stderr.strip() == (f"error: --resume: {tmp_path / 'd'} was measured on 1 CPU thread(s), this sweep "
                                    "would use 2: set OMP_NUM_THREADS=1 or pick another --out")
    assert RunDir(tmp_path / "d").rows() == d_rows  # nothing measured on the other thread count


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_dead_rank_ends_the_launch_in_one_line_and_leaves_a_resumable_run(tmp_path):
    out = tmp_path / "d"
    args = ["--launch", "torchrun", "--nproc-per-node", "2", "--cp", "2", "--bs", "1", "--seq", "40,48", "--timing", "eager",
            "--out", out, *SMALL[:-2], "--dist-timeout", "15", "--no-profile"]
    p = sweep(*args, env=_env(CPBENCH_INJECT_FAULT="1:exit:2"))
    assert p.returncode == 1
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: rank 1 exited with code 3; rows measured so far are kept"), p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    kept = RunDir(out).rows()
    assert {r["max_extend_len"] for r in kept} == {40} and len(kept) == 4  # the first cell survived
    assert_resumable(out)


def _processes_mentioning(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if marker in ln and "ps -eo" not in ln]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
@pytest.mark.slow
def test_stopping_the_launcher_stops_every_rank_and_keeps_the_rows(tmp_path, how):
    """ctrl-c: SIGINT to the launcher, torchrun and the ranks (one process group, as from a terminal); the
    launcher says once that the launch was stopped (the CLI adds no second 'interrupted' line), exit 130.
    sigkill: the launcher dies at once; torchrun gets SIGTERM from the kernel and stops its ranks, the
    lock goes with them and --resume finishes the sweep. (SIGTERM to the launcher alone takes the ctrl-c
    path: test_dist_launch.py checks that it is passed on.)"""
    out = tmp_path / how
    args = ["--launch", "torchrun", "--nproc-per-node", "2", "--cp", "2", "--bs", "1", "--timing", "eager",
            "--extend-len", ",".join(str(32 + 8 * i) for i in range(4)), "--out", out, *SMALL[:-2], "--dist-timeout", "20",
            "--no-profile"]
    p = subprocess.Popen([sys.executable, "-m", "cpbench", "sweep", *map(str, args)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(RunDir(out).rows()) < 4:  # the first cell is on disk
        time.sleep(0.2)
    assert RunDir(out).rows(), p.stderr.read() if p.poll() is not None else "no rows after 60 s"
    if how == "ctrl-c":
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert p.returncode == 130 and "Traceback" not in err, err[-2000:]
        assert lines == ["interrupted: the launch was stopped; rows measured so far are kept: rerun the same "
                         "command with --resume"], err[-2000:]
    else:
        p.kill()
        p.wait(timeout=40)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _processes_mentioning(str(out)):
        time.sleep(0.5)
    assert _processes_mentioning(str(out)) == []
    kept = RunDir(out).rows()
    assert kept and all(r["status"] == "ok" for r in kept)
    if how == "sigkill":
        again = sweep(*args, "--resume")
        assert again.returncode == 0, again.stderr[-2000:]
        assert len(by_key(RunDir(out).rows())) == 4 * 4


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_rank_that_cannot_rendezvous_says_so_in_one_line(tmp_path):
    env = _env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    p = sweep("--cp", "2", "--bs", "1", "--seq", "32", "--out", tmp_path / "r", *SMALL[:-2], "--dist-timeout", "5",
              env=env)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "rank 0 of 2 could not join the launch at 127.0.0.1" in lines[0]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
