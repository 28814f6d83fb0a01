"""`cpbench geometry` / `models` and bad-input exit codes, run as a user would (in-process: tests/clirun.py)."""

import json

import pytest
from clirun import cpbench

KEYS = {"rank", "eligible", "reason", "actual_seq_q_prev", "actual_seq_q_next", "kv_len_prev",
        "kv_len_next", "cu_seqlens_q_combined", "cu_seqlens_kv_combined", "max_seqlen_q_combined"}


def test_geometry_json():
    r = cpbench("geometry", "--cp", "4", "--extend", "11,13", "--prefix", "8,14", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [set(o) for o in rows] == [KEYS] * 4
    assert rows[3]["actual_seq_q_prev"] == [1, 2] and rows[3]["kv_len_next"] == [16, 24]
    assert rows[0]["cu_seqlens_kv_combined"] == [0, 10, 26, 45, 72]


def test_geometry_ineligible_json():
    r = cpbench("geometry", "--cp", "4", "--extend", "7,4096", "--json", "--rank", "1")
    rows = json.loads(r.stdout)
    assert r.returncode == 0 and rows[0]["eligible"] is False and "7" in rows[0]["reason"]


@pytest.mark.parametrize("args", [
    ["geometry", "--cp", "0", "--extend", "8"],
    ["geometry", "--cp", "4", "--rank", "4"],
    ["geometry", "--extend", "-3"],
    ["geometry", "--extend", ""],
    ["geometry", "--extend", "8,8,8", "--prefix", "1,2"],
    ["geometry", "--extend", "x"],
])
def test_bad_input_exit_2_one_line(args):
    r = cpbench(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")


def test_models_lists_presets():
    r = cpbench("models")
    assert r.returncode == 0 and "gpt-oss-120b" in r.stdout and "llama-3.1-8b" in r.stdout


@pytest.mark.parametrize("args", [
    ["sweep", "--backend", "fa9"], ["sweep", "--budget-ms", "abc"], ["sweep", "--out"], ["nope"],
    ["sweep", "--bogus", "1"], ["report"],
])
def test_usage_errors_are_one_line_exit_2(args):
    r = cpbench(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")


@pytest.mark.parametrize("args,needle", [
    (["--cp", "1000000000", "--extend", "3"], "--cp values must be <= 1024"),
    (["--cp", "99999999999999999999"], "--cp values must be <= 1024"),
    (["--extend", "1,99999999999"], "--extend-lens values must be <="),
])
def test_geometry_huge_values_one_line_exit_2(args, needle):
    r = cpbench("geometry", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and needle in r.stderr, r.stderr[-500:]
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("option", ["--bs", "--extend-len"])
def test_a_sweep_option_given_to_geometry_says_what_geometry_takes(option):
    r = cpbench("geometry", option, "4")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: no such option: {option}: geometry reads one batch: give one extend length "
                               "per request with --extend-lens")
    other = cpbench("geometry", "--bogus", "4")  # any other unknown option: click's message and the help hint
    assert other.returncode == 2 and "No such option: --bogus" in other.stderr and "--help" in other.stderr
