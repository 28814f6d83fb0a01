"""The environment a run was measured in (for the manifest and `cpbench doctor`), and SM clocks."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import platform
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import cpbench
from cpbench.errors import CpbenchInputError

if TYPE_CHECKING:
    import torch


def pkg_version(name: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


COMMIT_ENV = "CPBENCH_GIT_COMMIT"  # the commit a copied tree was made from, where its own .git is stale or absent


def git_commit() -> str | None:
    """Commit of the cpbench checkout (with ``-dirty`` when it has uncommitted changes), or None.

    ``$CPBENCH_GIT_COMMIT`` (7-40 hex digits) wins when set: a tree copied to another machine (a GPU box that
    receives the working tree) may carry a stale ``.git``, and the caller knows which commit it sent.
    Raises CpbenchInputError when it is set to anything but a commit sha."""
    pinned = os.environ.get(COMMIT_ENV, "").strip()
    if pinned:
        if not re.fullmatch(r"[0-9a-f]{7,40}", pinned):
            raise CpbenchInputError(f"${COMMIT_ENV}={pinned!r} is not a commit sha (7-40 hex digits): unset it or "
                                    "give `git rev-parse HEAD` of the tree that runs")
        return pinned
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        return None  # not a git checkout (an installed wheel, a copied tree)
    return sha + ("-dirty" if dirty else "")


def code_sha256(root: Path | None = None) -> str:
    """SHA-256 (hex) of cpbench's own source: every ``*.py`` file under the imported package directory
    (``root``, default ``cpbench``'s), in sorted order of their paths relative to it, each hashed as its
    relative POSIX path, a NUL byte, its bytes, a NUL byte. Identifies the code a run used where git
    metadata is missing or stale (an installed wheel, a copied tree); the same files give the same hash
    on any machine."""
    root = Path(cpbench.__file__).resolve().parent if root is None else Path(root)
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py"), key=lambda q: q.relative_to(root).as_posix()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def _nvml_handle(index: int):
    """``(pynvml, handle)`` of GPU ``index``, initialised once (clocks are read per timed sample)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # NVML missing or not permitted: clocks are simply unknown
        return None, None


def driver_version() -> str | None:
    nv, h = _nvml_handle(0)
    if nv is None:
        return None
    v = nv.nvmlSystemGetDriverVersion()
    return v.decode() if isinstance(v, bytes) else v


def sm_clock_mhz(device: torch.device) -> float:
    """Current SM clock of ``device`` in MHz via NVML; NaN on CPU or when NVML is unavailable."""
    if device.type != "cuda":
        return math.nan
    nv, h = _nvml_handle(device.index or 0)
    if nv is None:
        return math.nan
    try:
        return float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    except Exception:
        return math.nan


# Environment variables that change what a run measures or which status a cell gets: the CPU reference's
# TFLOP limit (``unsupported`` rows), where trtllm-gen finds its kernels (``unsupported`` offline), and the
# fault injection of the launch tests. The recorded command line starts with those that are set.
STATUS_ENV = ("CPBENCH_CPU_TFLOP_LIMIT", "FLASHINFER_NO_DOWNLOAD", "FLASHINFER_CUBIN_DIR", "CPBENCH_INJECT_FAULT")


def command_line() -> str:
    """The command as a user would retype it, e.g. ``CPBENCH_CPU_TFLOP_LIMIT=0.5 cpbench sweep --cp 4``:
    the :data:`STATUS_ENV` variables that are set, then ``cpbench`` and its arguments (under a torchrun
    launch, the launching command, ``$CPBENCH_COMMAND``)."""
    command = os.environ.get("CPBENCH_COMMAND") or shlex.join(["cpbench", *sys.argv[1:]])
    assigned = [f"{k}={shlex.quote(os.environ[k])}" for k in STATUS_ENV if k in os.environ]
    return " ".join([*assigned, command])


def environment(device: torch.device | None = None) -> dict:
    """Versions and hardware: python, torch, CUDA, driver, flashinfer(-cubin), GPU name and compute
    capability (or the CPU model), cpbench version, git commit and the SHA-256 of its source files
    (:func:`code_sha256`), the exact command line. With
    ``device`` None, torch is not imported and only what needs no torch is listed (``cpbench doctor``
    where torch is broken)."""
    env = {
        "cpbench_version": cpbench.__version__,
        "git_commit": git_commit(),
        "code_sha256": code_sha256(),
        "command": command_line(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": None,
        "cuda": None,
        "flashinfer": pkg_version("flashinfer-python"),
        "flashinfer_cubin": pkg_version("flashinfer-cubin"),
        "nvtx": pkg_version("nvtx"),
        "cpu": cpu_model(),
        "hostname": platform.node(),
    }
    if device is None:
        return env
    import torch

    env.update(torch=torch.__version__, cuda=torch.version.cuda, device=str(device))
    if device.type == "cuda":
        idx = device.index or 0
        cc = torch.cuda.get_device_capability(idx)
        env.update(gpu_name=torch.cuda.get_device_name(idx), compute_capability=f"{cc[0]}.{cc[1]}",
                   driver=driver_version(), sm_count=torch.cuda.get_device_properties(idx).multi_processor_count)
    else:
        env.update(gpu_name=None, compute_capability=None, driver=None)
    return env


def resolve_device(device: str | None) -> torch.device:
    """``--device`` as a torch device (default: cuda if torch sees a GPU, else cpu).

    Raises CpbenchInputError for a name torch does not know, cuda without a GPU, or another device type.
    """
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise CpbenchInputError(f"--device {device!r} is not a device: use cuda, cuda:N or cpu") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CpbenchInputError("--device cuda asked for, but torch sees no CUDA GPU: use --device cpu")
    if dev.type not in ("cuda", "cpu"):
        raise CpbenchInputError(f"--device {device!r} is not supported: use cuda, cuda:N or cpu")
    return dev
