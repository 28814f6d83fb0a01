"""Input that cannot work is refused before any work or any file: a backend this machine cannot run,
graph timing on CPU, a bad --mode; and `cpbench profile` picks CPU-sized defaults on a CPU, as sweep does."""

import json
import os

import pytest
import torch

from clirun import cpbench

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16"]


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("backend", ["flashinfer-fa3", "flashinfer-fa2", "trtllm-gen"])
def test_gpu_backend_on_cpu_exits_2_without_a_run_directory(tmp_path, no_gpu, backend):
    out = tmp_path / "run"
    r = cpbench("sweep", "--backend", backend, "--out", str(out), *TINY)
    assert r.returncode == 2 and f"backend {backend} cannot run here" in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("timing", ["both", "graph", "eager,graph"])
def test_graph_timing_on_cpu_names_the_option(tmp_path, no_gpu, timing):
    r = cpbench("sweep", "--timing", timing, "--out", str(tmp_path / "run"), *TINY)
    assert r.returncode == 2 and "--timing graph (or both) needs a CUDA device" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_bad_mode_or_timing_lists_every_choice(tmp_path, no_gpu):
    r = cpbench("sweep", "--mode", "fast", "--out", str(tmp_path / "run"), *TINY)
    assert r.returncode == 2 and "use two-call, fused, cp-native, a comma-separated list of them" in r.stderr
    r = cpbench("sweep", "--timing", "slow", "--out", str(tmp_path / "run"), *TINY)
    assert r.returncode == 2 and "use eager, graph, breakable, a comma-separated list of them" in r.stderr


def test_profile_without_cell_options_uses_cpu_defaults(tmp_path, no_gpu):
    r = cpbench("profile", "--json", "--out", str(tmp_path), *TINY)
    assert r.returncode == 0, r.stderr
    cell = json.loads(r.stdout)["cells"][0]
    assert (cell["cp_size"], cell["bs"], cell["max_extend_len"]) == (4, 1, 64)
    assert cell["total"]["two-call"] == 16 and cell["total"]["fused"] == 8  # 2 layers x (2 | 1) x 4 ranks


def test_profile_refuses_a_run_directory_another_command_writes(tmp_path):
    """profile takes the run directory's lock as sweep does: a second writer gets one line, and nothing of
    the holder's is touched."""
    from cpbench.results.store import RunDir

    held = RunDir.create(tmp_path / "run", resume=False)
    try:
        r = cpbench("profile", "--out", str(tmp_path / "run"), *TINY)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-800:]
        assert f"is being written by pid {os.getpid()} " in r.stderr
        assert not (tmp_path / "run" / "profile.json").exists()
    finally:
        held.unlock()
    r = cpbench("profile", "--out", str(tmp_path / "run"), *TINY)  # free again: it runs
    assert r.returncode == 0 and (tmp_path / "run" / "profile.json").exists(), r.stderr[-800:]


def test_a_torchrun_profile_into_a_held_directory_is_refused_before_launch(tmp_path):
    """The launcher checks the lock before starting ranks: exit 2 in one line, no rank waits on a collective."""
    from cpbench.results.store import RunDir

    held = RunDir.create(tmp_path / "run", resume=False)
    try:
        r = cpbench("profile", "--cp", "2", "--seq", "32", "--launch", "torchrun", "--nproc-per-node", "2",
                    "--out", str(tmp_path / "run"), *TINY)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-800:]
        assert f"is being written by pid {os.getpid()} " in r.stderr
    finally:
        held.unlock()
    (tmp_path / "afile").write_text("x")
    r = cpbench("profile", "--cp", "2", "--seq", "32", "--launch", "torchrun", "--nproc-per-node", "2",
                "--out", str(tmp_path / "afile"), *TINY)
    assert r.returncode == 2 and "is a file: pass a directory" in r.stderr, r.stderr[-800:]


def test_options_that_would_be_silently_ignored_are_refused():
    """#33: --model beside --model-config and --nproc-per-node on a simulated launch were ignored without a word;
    geometry --ranks 0,0 printed rank 0 twice."""
    r = cpbench("sweep", "--model", "llama-3.1-8b", "--model-config", "cfg.json", "--device", "cpu")
    assert r.returncode == 2 and "--model llama-3.1-8b and --model-config name two models" in r.stderr
    r = cpbench("sweep", "--nproc-per-node", "2", "--device", "cpu")
    assert r.returncode == 2 and "--nproc-per-node sets the processes of --launch torchrun" in r.stderr
    r = cpbench("geometry", "--cp", "4", "--ranks", "0,0", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 1


def test_compare_refuses_an_unwritable_out_before_printing(tmp_path):
    from pathlib import Path

    runs = Path(__file__).parent.parent / "docs" / "runs"
    r = cpbench("compare", runs / "h200-passes-a", runs / "h200-passes-b", "--out", tmp_path / "no" / "such" / "x.md")
    assert r.returncode == 2 and r.stdout == "" and "is not a writable directory" in r.stderr


def test_a_cell_too_big_for_the_cpu_is_refused_before_any_file(tmp_path, no_gpu):
    """#49: a cell over the CPU reference's TFLOP limit wrote a run directory of empty charts, then exited 2 naming
    --seq (not in --help). It is refused first, in one line naming --extend-len, the limit and a length that fits."""
    from cpbench.domain.cells import CellSpec
    from cpbench.domain.models import get_preset, with_overrides
    from cpbench.commands.runner import cpu_refusal

    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "2", "--bs", "1", "--extend-len", "10000000", "--out", out, *TINY)
    assert r.returncode == 2 and not out.exists(), (r.returncode, r.stderr)
    assert r.stdout == "", repr(r.stdout)  # nothing but the error line (a progress bar never started said "\n")
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "--seq" not in line, line
    head = "error: no cell can run on a CPU: about "
    assert line.startswith(head) and (" TFLOP per forward is too much for the CPU reference (limit 2 TFLOP, "
                                      "CPBENCH_CPU_TFLOP_LIMIT): use a GPU, or shorter requests: at bs 1 and "
                                      "cp_size 2, --extend-len ") in line, line
    fits = int(line.split("--extend-len ")[1].split()[0])
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=1, head_dim=16, page_size=16)
    assert cpu_refusal(model, CellSpec(2, (fits,), (0,))) is None  # the length named fits, one more does not
    assert cpu_refusal(model, CellSpec(2, (fits + 1,), (0,))) is not None
    assert line.endswith(f"--extend-len {fits} or less fits")
