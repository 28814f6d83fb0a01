"""`cpbench doctor`: what this machine can run, and why not (never raises)."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from pathlib import Path

from cpbench.errors import CpbenchInputError, CpbenchWarning
from cpbench.kernels.backends import registry
from cpbench.measure.env import environment, pkg_version


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


def _flashinfer_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("flashinfer")
    return Path(spec.origin).parent if spec and spec.origin else None


SOURCE_SUFFIXES = {".h", ".hpp", ".cuh", ".cu", ".cc", ".cpp", ".inc"}  # what the JIT's ninja files depend on


def jit_cache(root: Path | None = None, package_dir: Path | None = None) -> str:
    """FlashInfer's JIT cache (``$FLASHINFER_WORKSPACE_BASE`` or ``~``, then ``.cache/flashinfer``, as in
    flashinfer/jit/env.py): path, compiled modules and size. Ninja decides freshness by file times, so
    when a C++/CUDA source or header of the installed flashinfer (``package_dir``) is newer than the
    oldest compiled module, say that the modules will be rebuilt on first use (typical after a
    reinstall). Never raises: an unreadable cache is reported as such."""
    try:
        base = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE") or Path.home())
    except RuntimeError as e:  # no HOME and no passwd entry
        return f"unknown ({e}): set HOME or FLASHINFER_WORKSPACE_BASE"
    try:
        if root is None and base.exists() and not base.is_dir():
            return f"{base} (FLASHINFER_WORKSPACE_BASE or HOME) is not a directory: flashinfer cannot cache kernels"
        root = root or base / ".cache" / "flashinfer"
        if root.exists() and not root.is_dir():
            return f"{root} is not a directory: flashinfer cannot cache compiled kernels there"
        if not root.is_dir():
            return f"{root} (no cache yet: kernels compile with nvcc at first use, ~15-100 s each)"
        libs = [p.stat().st_mtime for p in root.rglob("*.so") if p.is_file()]
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        text = f"{root}: {len(libs)} compiled modules, {size / 2**20:.0f} MiB"
        package_dir = package_dir or _flashinfer_dir()
        if libs and package_dir and package_dir.is_dir():
            newest = max((p.stat().st_mtime for p in package_dir.rglob("*")
                          if p.suffix in SOURCE_SUFFIXES and p.is_file()), default=0.0)
            if newest > min(libs):
                text += ("; flashinfer's installed headers are newer than cached modules, so ninja will "
                         "rebuild them on first use (README: Known issues)")
        return text
    except OSError as e:
        return f"{root}: cannot be read ({e.strerror or e})"


def _safe(fn):
    """``fn()``, or a line saying why it failed: doctor reports, it never fails."""
    try:
        return fn()
    except Exception as e:
        return f"unknown ({type(e).__name__}: {e})"


def _without_run_keys(env: dict) -> dict:
    """The environment minus what only a run has (its command line and creation time)."""
    return {k: v for k, v in env.items() if k not in ("command", "created")}


def plugins() -> dict:
    """``{"plugins": [...], "left_out": [...]}``: each registered backend that a plugin declared (``name``,
    ``dist``, ``version``, ``declared``: its entry point's object, ``impl``), and each declaration left out
    (``plugin``: entry point and distribution, ``reason``). Never raises."""
    found = [{"name": s.name, "dist": s.dist, "version": s.version, "declared": s.origin, "impl": s.impl}
             for s in registry.backends().values() if s.dist != "cpbench"]
    return {"plugins": found, "left_out": [{"plugin": lo.what, "reason": lo.reason} for lo in registry.left_out()]}


def diagnose() -> dict:
    """``{"environment": {...}, "backends": {name: None | reason}, "plugins": [...], "left_out": [...]}`` for the
    default device (every key snake_case, for scripts: ``auto_backend``, ``flashinfer_jit_cache``, ...), one
    entry per registry backend (``cpbench.kernels.backends.registry.BACKEND_NAMES``, plugins' included; their
    sources and the plugins left out: :func:`plugins`). Never raises; when torch cannot be imported, says so and
    lists what it can without torch."""
    from cpbench.profiles.nsys import find_nsys

    has_flashinfer = pkg_version("flashinfer-python") is not None  # what the flashinfer row shows
    tools = {"nvcc": _safe(nvcc_version),  # the JIT cache only matters where flashinfer compiles into it
             "flashinfer_jit_cache": _safe(jit_cache) if has_flashinfer else "- (flashinfer is not installed)",
             "nsys": _safe(lambda: find_nsys() or "not found")}
    try:
        import torch
    except ImportError as e:
        why = f"torch cannot be imported ({e}): pip install torch (the CPU build on a machine without a GPU)"
        env = {**_without_run_keys(environment()), "torch": why, **tools, "auto_backend": None}
        return {"environment": env, "backends": dict.fromkeys(registry.backends(),
                                                              "needs torch, which cannot be imported"), **plugins()}
    from cpbench.kernels.backends import get_backend, resolve_auto
    from cpbench.domain.models import get_preset

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    env = _safe(lambda: environment(dev))
    env = {**(_without_run_keys(env) if isinstance(env, dict) else {"environment": env}), **tools}
    env["auto_backend"] = resolve_auto(dev)
    if has_flashinfer:
        from cpbench.kernels.backends.trtllm import fmha_v2_jit_state

        env["trtllm_fmha_v2_jit"] = _safe(fmha_v2_jit_state)
    backends = {}
    with warnings.catch_warnings():  # the plugins left out are listed below, not warned about
        warnings.simplefilter("ignore", CpbenchWarning)
        for name in registry.backends():
            try:
                backends[name] = get_backend(name).supports(dev, get_preset("gpt-oss-120b"), torch.bfloat16)
            except Exception as e:  # doctor reports, it never fails
                backends[name] = str(e) if isinstance(e, CpbenchInputError) else f"{type(e).__name__}: {e}"
    return {"environment": env, "backends": backends, **plugins()}
