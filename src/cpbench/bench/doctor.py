"""`cpbench doctor`: what this machine can run, and why not (never raises)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import torch

from cpbench.bench.backends import BACKEND_NAMES, get_backend, resolve_auto
from cpbench.bench.env import environment
from cpbench.bench.models import get_preset


def nvcc_version() -> str | None:
    exe = shutil.which("nvcc")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return exe
    lines = [ln for ln in out.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else exe


def jit_cache() -> str:
    """FlashInfer's JIT cache (``~/.cache/flashinfer/<version>/<arch>/``): path, modules and size."""
    root = Path.home() / ".cache" / "flashinfer"
    if not root.exists():
        return f"{root} (empty: kernels compile with nvcc at first use, ~15-100 s each)"
    libs = list(root.rglob("*.so"))
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return f"{root}: {len(libs)} compiled modules, {size / 2**20:.0f} MiB"


def diagnose() -> dict:
    """``{"environment": {...}, "backends": {name: None | reason}}`` for the default device."""
    from cpbench.profiles.nsys import find_nsys

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = environment(dev)
    env.pop("command", None)
    env.pop("created", None)
    env["nvcc"] = nvcc_version()
    env["flashinfer JIT cache"] = jit_cache()
    env["nsys"] = find_nsys() or "not found"
    env["auto backend"] = resolve_auto(dev)
    backends = {}
    for name in BACKEND_NAMES[1:]:
        try:
            backends[name] = get_backend(name).supports(dev, get_preset("gpt-oss-120b"), torch.bfloat16)
        except Exception as e:  # doctor reports, it never fails
            backends[name] = f"{type(e).__name__}: {e}"
    return {"environment": env, "backends": backends}
