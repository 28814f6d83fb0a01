"""Launching a sweep as one process per rank: re-running cpbench under ``torchrun --standalone``, or
joining a launch the user started with their own torchrun (RANK/WORLD_SIZE set; multi-node
rendezvous works unchanged).

The parent checks what it can before any process starts (one-line errors, exit 2), runs torchrun,
and reads the exit code rank 0 left in ``CPBENCH_EXIT_FILE`` (so the usual 0/1/2 codes survive
torchrun); a rank that dies or times out makes torchrun fail, which the parent reports in one line.
The ranks leave their pids and notes next to that file (:mod:`cpbench.ranks.watch`): a rank that
stops answering is named and killed once another rank's collective timed out, and no rank outlives the
launch.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from cpbench.ranks import watch
from cpbench.errors import CpbenchInputError

EXIT_FILE = "CPBENCH_EXIT_FILE"
AGENT_WAIT_S = 10.0  # how long torchrun may outlive its ranks (after rank 0 left its exit code) before it is killed
AGENT_WAIT_ENV = "CPBENCH_AGENT_WAIT_S"  # overrides AGENT_WAIT_S, seconds (the stopped-agent test lowers it)
AGENT_STUCK = "torchrun's agent did not exit after its ranks ended"
LAUNCH_FLAGS = {"--launch": 1, "--nproc-per-node": 1}  # parent-only options and how many values follow
GRACE_S = 2.0  # after a rank's collective failed: how long the other ranks get to end by themselves, s
STOP_WAIT_S = 30.0  # after SIGINT / SIGTERM or a kill: how long torchrun gets before SIGKILL, s


class LaunchInterrupted(Exception):
    """This process got SIGINT or SIGTERM during a launch, which was then stopped. The message is the one
    line to print (the CLI prints it and nothing else); ``code`` is the exit code, 128 + the signal."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def under_torchrun() -> bool:
    """True when this process was started by torchrun (RANK and WORLD_SIZE are set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def world_size_from_env() -> int:
    """``WORLD_SIZE`` as torchrun set it. Raises CpbenchInputError when it is not an integer >= 1."""
    raw = os.environ.get("WORLD_SIZE", "")
    if not raw.strip().isdigit() or int(raw) < 1:
        raise CpbenchInputError(f"WORLD_SIZE={raw!r} is not a process count: launch with torchrun, or unset "
                                "RANK/WORLD_SIZE for a simulated sweep")
    return int(raw)


def max_cpu_processes() -> int:
    """The most processes a CPU launch may start: 4 per core, at least 8 (each rank is a whole process
    importing torch; more only thrash)."""
    return max(8, 4 * (os.cpu_count() or 1))


def check_launch(nproc: int, cp_sizes: Sequence[int], device_type: str, visible_gpus: int,
                 dist_backend: str, backend: str) -> None:
    """Validate a torchrun launch before starting it.

    Raises:
        CpbenchInputError: more processes than visible GPUs, a cp_size that does not divide the world
            size, NCCL without CUDA, or a GPU-only attention backend on a CPU launch.
    """
    if nproc < 1:
        raise CpbenchInputError(f"--nproc-per-node must be >= 1, got {nproc}")
    if device_type != "cuda" and nproc > max_cpu_processes():
        raise CpbenchInputError(f"--nproc-per-node {nproc} is too many processes for a CPU launch on "
                                f"{os.cpu_count()} core(s) (at most {max_cpu_processes()}): lower it")
    if device_type == "cuda" and nproc > visible_gpus:
        raise CpbenchInputError(f"--nproc-per-node {nproc} is more than the {visible_gpus} visible GPU(s): "
                                "one process per GPU; lower it or set CUDA_VISIBLE_DEVICES")
    bad = [c for c in cp_sizes if nproc % c]
    if bad:
        raise CpbenchInputError(f"--cp {bad[0]} does not divide the world size {nproc}: a cell of cp_size C runs "
                                "on the first C ranks, so C must divide --nproc-per-node")
    if dist_backend == "nccl" and device_type != "cuda":
        raise CpbenchInputError("--dist-backend nccl needs CUDA GPUs: use --dist-backend gloo (or auto) on CPU")
    gpu_only = [b for b in backend.split(",") if b not in ("auto", "torch")]
    if device_type != "cuda" and gpu_only:
        raise CpbenchInputError(f"--backend {gpu_only[0]} runs on GPUs only, and this launch is on CPU: use "
                                "--backend torch, or a CUDA device")


def child_argv(argv: Sequence[str]) -> list[str]:
    """The cpbench arguments each rank runs: ``argv`` without the parent-only options."""
    out, skip = [], 0
    for a in argv:
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            skip = 0 if "=" in a else LAUNCH_FLAGS[name]
            continue
        out.append(a)
    return out


def torchrun_argv(nproc: int, argv: Sequence[str]) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m cpbench <argv>``."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "cpbench", *child_argv(argv)]


def run_torchrun(nproc: int, argv: Sequence[str], resume_hint: bool = True) -> int:
    """Run the launch and return cpbench's exit code: rank 0's code when it finished; 1 with a one-line
    message naming the failed rank when a rank died. Raises :class:`LaunchInterrupted` (exit code 130 /
    143) when this process was interrupted.

    torchrun dies with this process (``PR_SET_PDEATHSIG``), each rank with torchrun, and SIGINT / SIGTERM
    sent to this process are passed on to torchrun, which stops its ranks; ranks still alive when
    torchrun ends are killed: no rank outlives the launch. A rank that stops answering is named and
    killed about :data:`GRACE_S` after another rank's collective timed out (``--dist-timeout``). Rows
    written before are kept (``resume_hint``: say that ``--resume`` continues).
    """
    agent_wait = agent_wait_s()
    with tempfile.TemporaryDirectory(prefix="cpbench-launch-") as tmp:
        exit_file, err_path = Path(tmp) / "exit", Path(tmp) / "stderr"
        env = {**os.environ, EXIT_FILE: str(exit_file),  # the manifest records the user's command, not the ranks'
               "CPBENCH_COMMAND": shlex.join(["cpbench", *argv])}
        env.setdefault("OMP_NUM_THREADS", "1")
        with open(err_path, "w", encoding="utf-8") as err:
            proc = subprocess.Popen(torchrun_argv(nproc, argv), env=env, stderr=err, preexec_fn=_die_with_parent)
            try:
                signal_no, stuck = _wait_watching(proc, Path(tmp), agent_wait)
            finally:
                watch.kill_ranks(Path(tmp))
        stderr = err_path.read_text(encoding="utf-8", errors="replace")
        resume = "; rows measured so far are kept: rerun the same command with --resume" if resume_hint else ""
        if signal_no is not None:
            sys.stderr.write(_child_lines(stderr, keep_errors=False))
            raise LaunchInterrupted(f"interrupted: the launch was stopped{resume}", 128 + signal_no)
        code = exit_file.read_text(encoding="utf-8").strip() if exit_file.exists() else ""
        if stuck == AGENT_STUCK and code.isdigit():  # the ranks finished: their rows and exit code stand
            sys.stderr.write(_child_lines(stderr))
            sys.stderr.write(f"warning: {AGENT_STUCK} (stopped?); it was killed {agent_wait:g} s later\n")
            return int(code)
        if proc.returncode == 0 and code.isdigit():
            sys.stderr.write(_child_lines(stderr))
            return int(code)
        sys.stderr.write(_child_lines(stderr, keep_errors=False))
        why = stuck or failure_summary(stderr, proc.returncode, watch.notes(Path(tmp)))
        sys.stderr.write(f"error: {why}{resume}\n")
        return 1


def failure_summary(stderr: str, returncode: int, notes: dict[int, str] | None = None) -> str:
    """One line about a failed launch from torchrun's stderr: the first failed rank and its exit code (or
    signal), and the last error line a rank printed, e.g. ``rank 1 exited with code 3 (RuntimeError: ...)``;
    or, when torchrun names no rank, the first note a rank left (``notes``: :func:`watch.notes`)."""
    if notes and not re.search(r"rank\s*:\s*(\d+)", stderr):
        r, text = next(iter(notes.items()))
        return f"rank {r}: {text}"
    rank = re.search(r"rank\s*:\s*(\d+)", stderr)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", stderr)
    # torchrun prefixes each rank's lines with "[rankN]: "; the error line is the same after it
    lines = [re.sub(r"^\[(?:default)?rank\d+\]:\s?", "", ln) for ln in stderr.splitlines()]
    errors = [ln.strip() for ln in lines
              if ln.startswith("error:") or re.match(r"^\s*[\w.]*(Error|Exception)\b: ", ln)]
    errors = [e.removeprefix("error:").strip() for e in errors if "ChildFailedError" not in e]
    if rank and code:
        who = f"rank {rank.group(1)} exited with code {code.group(1)}"
    elif returncode < 0:
        who = (f"torchrun was killed by {signal.Signals(-returncode).name}; its ranks were stopped"
               if -returncode in signal.valid_signals() else f"torchrun was killed (exit {returncode})")
    else:
        who = f"a rank of the torchrun launch failed (torchrun exit {returncode})"
    return who + (f" ({errors[-1][:200]})" if errors else "")


def agent_wait_s() -> float:
    """How long torchrun's agent may outlive its ranks before it is killed, s: :data:`AGENT_WAIT_S`, or
    ``CPBENCH_AGENT_WAIT_S`` when set. Raises CpbenchInputError when that is not a number of seconds > 0."""
    raw = os.environ.get(AGENT_WAIT_ENV, "").strip()
    if not raw:
        return AGENT_WAIT_S
    try:
        wait = float(raw)
    except ValueError:
        wait = float("nan")
    if not 0 < wait <= 86400:  # NaN fails too
        raise CpbenchInputError(f"{AGENT_WAIT_ENV}={raw!r} is not a number of seconds in (0, 86400]: unset it "
                                f"for the default ({AGENT_WAIT_S:g} s)")
    return wait


def _wait_watching(proc: subprocess.Popen, launch_dir: Path,
                   agent_wait: float = AGENT_WAIT_S) -> tuple[int | None, str]:
    """Wait for ``proc`` (torchrun), watching its ranks. SIGINT or SIGTERM received meanwhile is sent on
    to it (torchrun then stops its ranks). Once a rank left a note (its collective failed), the ranks get
    :data:`GRACE_S` to end; then the ranks that stopped answering are named, every rank is killed and
    torchrun is stopped. torchrun gets SIGKILL :data:`STOP_WAIT_S` after being told to stop.

    When every rank has ended and rank 0 left its exit code but torchrun does not exit (its agent was stopped),
    torchrun is killed ``agent_wait`` seconds later (:func:`agent_wait_s`) and :data:`AGENT_STUCK` returned.

    Returns:
        (the signal received or None, one line naming the ranks that stopped answering, :data:`AGENT_STUCK`,
        or "").
    """
    got: list[int] = []
    stop_at: list[float] = []  # when torchrun was told to stop

    def forward(signum, _frame):
        got.append(signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            stop_at.append(time.monotonic())

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    noted_at, stuck, ended_at = None, "", None
    try:
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if stop_at and now - stop_at[0] > STOP_WAIT_S:
                proc.kill()
            if got or stuck:
                continue
            if (launch_dir / "exit").exists() and not watch.alive(launch_dir):  # every rank ended, rank 0's code left
                ended_at = ended_at or now
                if now - ended_at > agent_wait:  # torchrun's agent itself stopped answering (SIGSTOP)
                    proc.kill()  # SIGKILL ends a stopped process too
                    proc.wait()
                    return None, AGENT_STUCK
                continue
            if noted_at is None and watch.notes(launch_dir):
                noted_at = now
            if noted_at is not None and now - noted_at > GRACE_S:
                who = watch.stuck(launch_dir)
                if who:
                    stuck = watch.stuck_summary(launch_dir, who)
                    watch.kill_ranks(launch_dir)
                    proc.terminate()
                    stop_at.append(now)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return (got[0] if got else None), stuck


def _die_with_parent() -> None:
    """In the torchrun child (Linux): receive SIGTERM when the launching process dies, even by SIGKILL."""
    watch._prctl_pdeathsig(signal.SIGTERM)


def write_exit_code(code: int) -> None:
    """Rank 0 of a launch started by :func:`run_torchrun` leaves its exit code for the parent."""
    path = os.environ.get(EXIT_FILE)
    if path and os.environ.get("RANK", "0") == "0":
        Path(path).write_text(str(code), encoding="utf-8")


def launch_dir() -> Path | None:
    """The private directory of a launch started by :func:`run_torchrun` (None for the user's own)."""
    path = os.environ.get(EXIT_FILE)
    return Path(path).parent if path else None


def _child_lines(stderr: str, keep_errors: bool = True) -> str:
    """The ranks' own stderr lines (warnings, errors) without torchrun's multi-line failure report."""
    keep = []
    for ln in stderr.splitlines():
        if ln.startswith(("warning:", "error:" if keep_errors else "warning:")):
            keep.append(ln)
    return "".join(x + "\n" for x in dict.fromkeys(keep))
