"""A full disk (ENOSPC) while a run directory is written: the message names the file, no 0-byte temporary file
is left, and the rows and manifest already there stay whole (#49). /dev/full stands in for the full disk: a
file linked to it accepts the open and fails the write with ENOSPC, as a full filesystem does."""

import errno
import json
import os

import pytest

from clirun import cpbench
from cpbench.results.store import RunDir

TINY = ["--layers", "1", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16",
        "--budget-ms", "2", "--timing", "eager", "--no-profile", "--no-report"]

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def test_a_manifest_write_on_a_full_disk_names_the_file_and_leaves_no_tmp(tmp_path):
    run = RunDir(tmp_path)
    run.write_manifest({"command": "cpbench sweep"})
    tmp = tmp_path / "manifest.tmp"
    os.symlink("/dev/full", tmp)
    with pytest.raises(OSError) as e:
        run.write_manifest({"command": "cpbench sweep --resume"})
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "manifest.json")
    assert not os.path.lexists(tmp)
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"command": "cpbench sweep"}  # the old one


def test_a_row_append_on_a_full_disk_names_the_file(tmp_path):
    os.symlink("/dev/full", tmp_path / "results.jsonl")
    row = {"schema_version": 3, "model": "m", "backend": "torch", "dtype": "fp32", "launch": "simulated",
           "world_size": 1, "gather": "none", "fused_order": "prev-next", "tp_size": 1, "timing": "eager",
           "cp_size": 2, "bs": 1, "max_extend_len": 32, "prefix_len": 0, "extend_lens": "32", "batch": 0,
           "rank": 0, "mode": "fused", "status": "ok"}
    with pytest.raises(OSError) as e:
        RunDir(tmp_path).append(row)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "results.jsonl")


def test_a_sweep_on_a_full_disk_ends_in_one_line_naming_the_file(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    os.symlink("/dev/full", out / "manifest.tmp")  # the sweep's first manifest write meets a full disk
    args = ["sweep", "--cp", "2", "--bs", "1", "--extend-len", "16", *TINY, "--out", out]
    r = cpbench(*args)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"error: OSError: [Errno 28] No space left on device: '{out / 'manifest.json'}': check that path (a file "
        "where a folder belongs or the reverse, permissions, free space)"), r.stderr
    assert not os.path.lexists(out / "manifest.tmp")
    again = cpbench(*args)  # space again: the lock went with the failed sweep
    assert again.returncode == 0, again.stderr
