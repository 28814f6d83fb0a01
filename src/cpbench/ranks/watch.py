"""The ranks of a launch as the launcher sees them, through files in the launch's private directory.

Each rank leaves its pid there when it starts (``pid.<rank>``) and ties its life to torchrun's (a
parent-death signal, Linux). A rank whose collective fails (it timed out: another rank stopped
answering; or a peer is gone) leaves a note (``broken.<rank>``, one line) and waits to be ended. The
launcher polls the directory: a rank still alive without a note once another rank left one is the
rank that stopped answering; the launcher names it and kills every rank, so no rank outlives the
launch, whatever killed it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _prctl_pdeathsig(sig: int) -> None:
    """Receive ``sig`` when the parent process dies, even by SIGKILL (Linux; a no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def enter_rank(launch_dir: Path | None, rank: int) -> None:
    """In a rank: end with torchrun's agent (SIGTERM when it dies, even by SIGKILL; a rank whose agent
    already died ends now), and leave this process's pid for the launcher (``launch_dir`` None: a launch
    the user started, nothing to leave)."""
    _prctl_pdeathsig(signal.SIGTERM)
    if launch_dir is not None:  # (the user's own torchrun may be pid 1 itself, in a container)
        if os.getppid() == 1:  # the agent died before the signal was armed
            os._exit(1)
        (launch_dir / f"pid.{rank}").write_text(str(os.getpid()), encoding="utf-8")


def leave_note(launch_dir: Path | None, rank: int, text: str) -> None:
    """In a rank whose collective failed: the one-line note the launcher reads (``rank <r>: <text>``)."""
    if launch_dir is not None:
        (launch_dir / f"broken.{rank}").write_text(text, encoding="utf-8")


def await_end(wait_s: float = 30.0) -> None:
    """In a rank that left a note: wait to be ended (torchrun stops the ranks once one died, the launcher
    once it named a rank that stopped answering), so that this rank's exit is not taken for the fault;
    exit 1 after ``wait_s`` seconds if nobody did."""
    time.sleep(wait_s)
    os._exit(1)


def _by_rank(launch_dir: Path, prefix: str) -> dict[int, str]:
    out = {}
    for p in launch_dir.glob(prefix + ".*"):
        suffix = p.name[len(prefix) + 1:]
        if suffix.isdigit():
            try:
                out[int(suffix)] = p.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
    return dict(sorted(out.items()))


def notes(launch_dir: Path) -> dict[int, str]:
    """Each rank's note, by rank (ranks whose collective failed)."""
    return _by_rank(launch_dir, "broken")


def _state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``T`` stopped, ``Z`` zombie, ...), None when it is gone
    or is no cpbench process (its pid was reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"cpbench" not in cmdline:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def alive(launch_dir: Path) -> dict[int, str]:
    """The ranks whose process lives (not a zombie), by rank: their state letter."""
    out = {}
    for rank, pid in _by_rank(launch_dir, "pid").items():
        st = _state(int(pid)) if pid.isdigit() else None
        if st is not None and st not in ("Z", "X"):
            out[rank] = st
    return out


def stuck(launch_dir: Path) -> list[tuple[int, str]]:
    """Ranks that stopped answering: alive without a note while another rank left one, as ``(rank,
    state)``; stopped processes (SIGSTOP, state ``T``) first-hand when there are any."""
    left = notes(launch_dir)
    if not left:
        return []
    quiet = [(r, st) for r, st in alive(launch_dir).items() if r not in left]
    return [x for x in quiet if x[1] in ("T", "t")] or quiet


def kill_ranks(launch_dir: Path) -> None:
    """SIGKILL every rank process still alive (a stopped one too)."""
    for rank, pid in _by_rank(launch_dir, "pid").items():
        if pid.isdigit() and _state(int(pid)) is not None:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def stuck_summary(launch_dir: Path, who: list[tuple[int, str]]) -> str:
    """One line naming the ranks that stopped answering and what the first rank that gave up saw."""
    first, text = next(iter(notes(launch_dir).items()), (None, ""))
    ranks = ", ".join(str(r) for r, _ in who)
    how = " (its process was stopped)" if all(st in ("T", "t") for _, st in who) else ""
    subject = f"rank {ranks} stopped answering" if len(who) == 1 else f"ranks {ranks} stopped answering"
    return f"{subject}{how}: rank {first} gave up waiting: {text}"
