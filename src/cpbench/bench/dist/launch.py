"""Launching a sweep as one process per rank: re-running cpbench under ``torchrun --standalone``, or
joining a launch the user started with their own torchrun (RANK/WORLD_SIZE set; multi-node
rendezvous works unchanged).

The parent checks what it can before any process starts (one-line errors, exit 2), runs torchrun,
and reads the exit code rank 0 left in ``CPBENCH_EXIT_FILE`` (so the usual 0/1/2 codes survive
torchrun); a rank that dies or times out makes torchrun fail, which the parent reports in one line.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from cpbench.errors import CpbenchInputError

EXIT_FILE = "CPBENCH_EXIT_FILE"
LAUNCH_FLAGS = {"--launch": 1, "--nproc-per-node": 1}  # parent-only options and how many values follow


def under_torchrun() -> bool:
    """True when this process was started by torchrun (RANK and WORLD_SIZE are set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def check_launch(nproc: int, cp_sizes: Sequence[int], device_type: str, visible_gpus: int,
                 dist_backend: str, backend: str) -> None:
    """Validate a torchrun launch before starting it.

    Raises:
        CpbenchInputError: more processes than visible GPUs, a cp_size that does not divide the world
            size, NCCL without CUDA, or a GPU-only attention backend on a CPU launch.
    """
    if nproc < 1:
        raise CpbenchInputError(f"--nproc-per-node must be >= 1, got {nproc}")
    if device_type == "cuda" and nproc > visible_gpus:
        raise CpbenchInputError(f"--nproc-per-node {nproc} is more than the {visible_gpus} visible GPU(s): "
                                "one process per GPU; lower it or set CUDA_VISIBLE_DEVICES")
    bad = [c for c in cp_sizes if nproc % c]
    if bad:
        raise CpbenchInputError(f"--cp {bad[0]} does not divide the world size {nproc}: a cell of cp_size C runs "
                                "on the first C ranks, so C must divide --nproc-per-node")
    if dist_backend == "nccl" and device_type != "cuda":
        raise CpbenchInputError("--dist-backend nccl needs CUDA GPUs: use --dist-backend gloo (or auto) on CPU")
    if device_type != "cuda" and backend not in ("auto", "torch"):
        raise CpbenchInputError(f"--backend {backend} runs on GPUs only, and this launch is on CPU: use "
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


def run_torchrun(nproc: int, argv: Sequence[str], kill_after_s: float | None = None) -> int:
    """Run the launch and return cpbench's exit code: rank 0's code when it finished, else 1 with a
    one-line message on stderr (a rank died, or the launch timed out)."""
    with tempfile.TemporaryDirectory(prefix="cpbench-launch-") as tmp:
        exit_file = Path(tmp) / "exit"
        env = {**os.environ, EXIT_FILE: str(exit_file),  # the manifest records the user's command, not the ranks'
               "CPBENCH_COMMAND": shlex.join(["cpbench", *argv])}
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TORCHELASTIC_ERROR_FILE", str(Path(tmp) / "error.json"))
        try:
            proc = subprocess.run(torchrun_argv(nproc, argv), env=env, timeout=kill_after_s,
                                  stderr=subprocess.PIPE, text=True)
        except subprocess.TimeoutExpired:
            sys.stderr.write(f"error: the torchrun launch ran past {kill_after_s:g} s and was stopped; rows measured so "
                             "far are kept: rerun with --resume\n")
            return 1
        code = exit_file.read_text().strip() if exit_file.exists() else ""
        if proc.returncode == 0 and code.isdigit():
            sys.stderr.write(_child_lines(proc.stderr))
            return int(code)
        last = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:") or "Error" in ln][-1:]
        sys.stderr.write(_child_lines(proc.stderr, keep_errors=False))
        sys.stderr.write(f"error: a rank of the torchrun launch failed (torchrun exit {proc.returncode}"
                         f"{': ' + last[0][:200] if last else ''}); rows measured so far are kept: rerun "
                         "the same command with --resume\n")
        return 1


def write_exit_code(code: int) -> None:
    """Rank 0 of a launch started by :func:`run_torchrun` leaves its exit code for the parent."""
    path = os.environ.get(EXIT_FILE)
    if path and os.environ.get("RANK", "0") == "0":
        Path(path).write_text(str(code))


def _child_lines(stderr: str, keep_errors: bool = True) -> str:
    """The ranks' own stderr lines (warnings, errors) without torchrun's multi-line failure report."""
    keep = []
    for ln in stderr.splitlines():
        if ln.startswith(("warning:", "error:" if keep_errors else "warning:")):
            keep.append(ln)
    return "".join(x + "\n" for x in dict.fromkeys(keep))
