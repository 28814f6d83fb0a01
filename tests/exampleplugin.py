"""The example plugin package (examples/cpbench-plugin-example) installed as a user would install it: ``pip
install`` of a copy into a temporary directory (``--target``, no dependencies, no build isolation: nothing is
downloaded), which a test then puts on sys.path, where importlib.metadata finds its entry point. The copy keeps
pip's build files out of the checkout."""

from __future__ import annotations

import functools
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cpbench.kernels.backends import registry

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cpbench-plugin-example"


@functools.cache
def install(base: Path) -> Path:
    """Install the example plugin under ``base`` once per process; the directory that holds its package and its
    .dist-info."""
    root = base / "example-plugin"
    shutil.copytree(EXAMPLE, root / "src", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(site), str(root / "src")],
                   check=True, capture_output=True, timeout=300)
    return site


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    """The directory the example plugin is installed into (pip runs once per test process)."""
    return install(tmp_path_factory.getbasetemp())


@pytest.fixture
def installed(example_site, monkeypatch):
    """The example plugin on sys.path and the registry read again; both put back afterwards."""
    monkeypatch.syspath_prepend(str(example_site))  # also invalidates the import caches
    registry.reload()
    yield example_site
    monkeypatch.undo()
    for name in [m for m in sys.modules if m.split(".")[0] == "cpbench_plugin_example"]:
        del sys.modules[name]
    importlib.invalidate_caches()
    registry.reload()
