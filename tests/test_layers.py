"""The import contracts bite: on a copy of the package, each kind of break the layer picture forbids
(torch in a torch-free layer, an upward import, the core or another study importing a study, typer outside the
CLI, a cycle hidden in a function)
makes `lint-imports` fail, and the untouched copy passes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.argv = ['lint-imports', *sys.argv[1:]]; " \
       "lint_imports_command()"


@pytest.fixture
def tree(tmp_path):
    shutil.copytree(ROOT / "src" / "cpbench", tmp_path / "src" / "cpbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run([sys.executable, "-c", LINT, "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def append(tree: Path, module: str, code: str) -> None:
    """Append ``code`` to ``module`` in the copy (a module that does not exist yet is made, as a package)."""
    path = tree / "src" / Path(*module.split(".")).with_suffix(".py")
    if not path.exists():
        path = tree / "src" / Path(*module.split(".")) / "__init__.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    path.write_text(path.read_text() + "\n" + code + "\n")


def test_the_tree_keeps_every_contract(tree):
    proc = lint(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


BREAKS = {
    "torch in domain": ("cpbench.domain.geometry", "import torch", "no torch in domain"),
    "torch in results, inside a function": ("cpbench.results.store", "def _t():\n    import torch", "no torch in domain"),
    "domain imports commands (upward)": ("cpbench.domain.lengths", "def _up():\n    from cpbench.commands import sweep", "layers"),
    "measure imports the CLI (upward)": ("cpbench.measure.timing", "import cpbench.cli.options", "layers"),
    "report imports commands (siblings)": ("cpbench.report.style", "import cpbench.commands.doctor", "layers"),
    "rich outside the CLI": ("cpbench.results.verdicts", "import rich", "typer and rich"),
    "kernels read the results format": ("cpbench.kernels.kv", "from cpbench.results import schema",
                                        "know nothing of the results"),
    "the core imports a study": ("cpbench.commands.sweep", "def _s():\n    import cpbench.studies.engine_traces.traces",
                                 "layers"),
    "a study imports another": ("cpbench.studies.another", "import cpbench.studies.engine_traces.verdict",
                                "each study stands alone"),
    "a cycle inside a package": ("cpbench.results.keys", "def _c():\n    from cpbench.results import compare",
                                 "no import cycles"),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_break_fails_lint_imports(tree, name):
    module, code, contract = BREAKS[name]
    append(tree, module, code)
    proc = lint(tree)
    assert proc.returncode != 0, proc.stdout
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert contract in " ".join(broken.split()), proc.stdout
