"""Provenance: every manifest records a hash of cpbench's own source next to the git commit (the project's
prose is linted by scripts/lint_prose.py, outside the unit suite)."""

import hashlib
import re
from pathlib import Path

import cpbench
from cpbench.measure.env import code_sha256, environment

ROOT = Path(__file__).resolve().parent.parent


def test_code_sha256_hand_computed_vector(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_bytes(b"y = 2\n")  # written first, hashed second (sorted by path)
    (tmp_path / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "notes.txt").write_bytes(b"not source")  # only *.py files count
    want = hashlib.sha256(b"a.py\0x = 1\n\0sub/b.py\0y = 2\n\0").hexdigest()
    assert code_sha256(tmp_path) == want
    (tmp_path / "a.py").write_bytes(b"x = 2\n")
    assert code_sha256(tmp_path) != want


def test_code_sha256_is_of_the_imported_package_and_in_every_environment():
    pkg = Path(cpbench.__file__).resolve().parent
    h = code_sha256()
    assert h == code_sha256(pkg) and re.fullmatch(r"[0-9a-f]{64}", h)
    env = environment()  # no torch: the manifest's and doctor's common part
    assert env["code_sha256"] == h and "git_commit" in env


def test_a_copied_tree_names_the_commit_it_was_sent_from(monkeypatch):
    import pytest

    from cpbench.errors import CpbenchInputError
    from cpbench.measure.env import git_commit

    monkeypatch.setenv("CPBENCH_GIT_COMMIT", "133a121")
    assert git_commit() == "133a121" and environment()["git_commit"] == "133a121"  # not the tree's stale HEAD
    monkeypatch.setenv("CPBENCH_GIT_COMMIT", "HEAD-dirty")
    with pytest.raises(CpbenchInputError, match="is not a commit sha"):
        git_commit()
