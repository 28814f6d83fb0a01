"""`cpbench explain` on CPU: the refusals, and the whole parent path (ncu run, CSV, work split, verdict,
markdown, chart) with a stand-in ncu that replays a CSV fixture instead of profiling a GPU child."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import torch

from clirun import cpbench, replacing
from cpbench.kernels.backends.registry import kernel_patterns
from cpbench.results.verdicts import effect_text

FIX = Path(__file__).parent / "fixtures"
CELL = ["--cp", "4", "--bs", "1", "--seq", "2048", "--rank", "0", "--backend", "flashinfer-fa2", "--timing", "eager"]

FAKE_NCU = r'''#!{python}
import json, shutil, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 1) (public-release)")
    sys.exit(0)
if {perm!r}:
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
log = args[args.index("--log-file") + 1]
child = args[args.index("--log-file") + 2:]
out = child[child.index("--out") + 1]
assert child[-1] == "--explain-child" and child[1:3] == ["-m", "cpbench"], child
print("child argv:", " ".join(child[3:]))
includes = [args[i + 1] for i, a in enumerate(args) if a == "--nvtx-include"]
assert includes == ["cpbench@explain cp4 bs1 extend2048 r{rank} two-call eager/",
                    "cpbench@explain cp4 bs1 extend2048 r{rank} fused eager/"], includes
lines = open({csv!r}).read().splitlines()
ids = {ids!r}
keep = [ln for ln in lines if ids is None or not ln.startswith('"') or ln.startswith('"ID"')
        or ln.startswith('"",') or int(ln.split(",")[0].strip('"')) in ids]
open(log, "w").write("\n".join(keep) + "\n")
import pathlib
pathlib.Path(out).mkdir(parents=True, exist_ok=True)
pathlib.Path(out, "explain_child.json").write_text(json.dumps({{
    "labels": {{}}, "calls": {{"two-call": ["prev", "next"] * {layers}, "fused": ["combined"] * {layers}}},
    "kernel_patterns": {patterns!r}, "diff_vs_two_call": 0.0078125,
    "max_abs_err": {{"two-call": 0.0117, "fused": 0.0154}}}}))
'''


@pytest.fixture
def as_gpu(monkeypatch):
    """Make the command believe it runs on a CUDA device (only the parent side runs here)."""
    import cpbench.cli.options as opts

    from cpbench.kernels.backends.flashinfer_fa import FlashInferBackend

    monkeypatch.setattr(opts, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(FlashInferBackend, "supports", lambda self, device, model, dtype=None: None)
    monkeypatch.setattr("cpbench.profiles.ncu.NCU_GLOBS", ())


# what the child writes: the registry's patterns (ncu's names carry no namespace: profiles/ncu.group_calls)
PATTERNS = {b: list(kernel_patterns(b)) for b in ("flashinfer-fa2", "flashinfer-fa3")}


def _fake_ncu(tmp_path, perm=False, csv="ncu_raw_synthetic_fa2.csv", ids=None, rank=0, layers=2,
              backend="flashinfer-fa2") -> dict:
    """A stand-in ``ncu`` on PATH: answers --version, checks the argv, writes the rows ``ids`` of a CSV
    fixture as its log and the child's JSON (2 layers: prev/next twice, combined twice)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable, perm=perm, csv=str(FIX / csv), ids=ids, rank=rank,
                                   layers=layers, patterns=PATTERNS[backend]))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_cpu_refuses_in_one_line(tmp_path):
    r = cpbench("explain", *CELL, "--out", str(tmp_path / "x"), "--device", "cpu")
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr and "cpbench profile" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # refused before any work


def test_a_backend_that_cannot_run_is_refused_before_ncu(tmp_path, as_gpu, monkeypatch):
    from cpbench.kernels.backends.flashinfer_fa import FlashInferBackend

    monkeypatch.setattr(FlashInferBackend, "supports", lambda self, device, model, dtype=None: "fa2 needs X")
    r = cpbench("explain", *CELL, "--out", str(tmp_path / "x"), env={"PATH": str(tmp_path)})
    assert r.returncode == 2 and r.stderr.startswith("error: backend flashinfer-fa2: fa2 needs X"), r.stderr
    assert "ncu" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_no_ncu_says_so(tmp_path, as_gpu):
    r = cpbench("explain", *CELL, "--out", str(tmp_path / "x"), env={"PATH": str(tmp_path)})
    assert r.returncode == 2 and "ncu (Nsight Compute) not found" in r.stderr and "cpbench profile" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_counter_permission_says_so(tmp_path, as_gpu):
    r = cpbench("explain", *CELL, "--out", str(tmp_path / "x"), env=_fake_ncu(tmp_path, perm=True))
    assert r.returncode == 2 and "ERR_NVGPUCTRPERM" in r.stderr and "cpbench profile" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, needle", [
    (["--backend", "torch"], "flashinfer-fa2, flashinfer-fa3, trtllm-fmha-v2, not torch"),
    (["--backend", "fa3"], "flashinfer-fa2, flashinfer-fa3, trtllm-fmha-v2, not fa3"),  # FlashAttention-3
    (["--timing", "both"], "unknown --timing"),
    (["--fused-order", "reverse"], "unknown --fused-order"),
    (["--seq", "2048,4096"], "one cell"),
    (["--rank", "4"], "--ranks 4 is outside"),
])
def test_bad_input(tmp_path, as_gpu, args, needle):
    r = cpbench("explain", *replacing(CELL, *args), "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and needle in r.stderr, r.stderr


def test_end_to_end_with_a_replayed_csv(tmp_path, as_gpu):
    out = tmp_path / "x"
    r = cpbench("explain", *CELL, "--out", str(out), "--json", env=_fake_ncu(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["ncu_version"] == "2025.3.1.0" and rep["metrics"][0] == "gpu__time_duration.sum"
    assert (rep["model"], rep["num_layers"], rep["sms"], rep["diff_vs_two_call"]) == ("gpt-oss-120b+layers2", 2, 132, 0.0078125)
    calls = rep["calls"]
    assert [(c["mode"], c["layer"], c["window_left"], c["call"]) for c in calls] == [
        ("two-call", 0, 127, "prev"), ("two-call", 0, 127, "next"), ("two-call", 1, -1, "prev"),
        ("two-call", 1, -1, "next"), ("fused", 0, 127, "combined"), ("fused", 1, -1, "combined")]
    assert calls[0]["merge_kernels"] == 1 and calls[0]["total_us"] == pytest.approx(31.2 + 6.1)
    win, full = rep["verdicts"]
    assert win["cause"] == full["cause"] == "split-kv-merge"
    assert win["two_call_us"] == pytest.approx(31.2 + 6.1 + 33.9 + 6.3) and win["fused_us"] == pytest.approx(40.1)
    assert "2 merge kernel(s) (12.4 µs of 77.5 µs)" in win["sentences"][0]
    assert rep["max_abs_err"] == {"two-call": 0.0117, "fused": 0.0154}
    assert set(rep["work_split"]) == {"127", "-1"} and rep["work_split"]["-1"]["fused"]["split_kv"] is False
    md = (out / "explain.md").read_text()
    assert md.startswith("### Why fused wins: gpt-oss-120b+layers2 flashinfer-fa2 cp4 bs1 extend2048 rank 0")
    assert "| 1 (full) | fused | combined | 190.8 |" in md and "ncu 2025.3.1.0" in md
    t2 = sum(v["two_call_us"] for v in rep["verdicts"])
    tf = sum(v["fused_us"] for v in rep["verdicts"])  # the effect in the report's notation, not a ratio
    assert f"fused {tf:.1f} µs (fused saves {effect_text(t2 / tf)} of the two-call time)." in md
    assert "max |fused - two-call| 0.0078, max error vs the fp32 reference 0.0154" in md
    assert (out / "explain.png").stat().st_size > 0 and (out / "ncu_raw.csv").exists()


H200 = ["--cp", "4", "--bs", "1", "--seq", "2048", "--timing", "eager", "--layers", "1"]


@pytest.mark.parametrize("backend, rank, ids, cause, phrases", [
    # real ncu 2025.3.1 rows from an H200 (window layer of gpt-oss-120b, cp 4, bs 1, 2048 tokens)
    ("flashinfer-fa3", 0, [0, 1, 2], "fused-imbalance",
     ["window 128: the fused kernel takes 47.4 µs against 33.2 µs for both calls",
      "gets 14 KV tiles against 3 + 4 in the two launches"]),
    ("flashinfer-fa3", 3, [3, 4, 5], "fused-fewer-launches", ["window 128: one launch instead of two: 32.6 µs against 38.6 µs"]),
    ("flashinfer-fa2", 0, [0, 1, 2, 3, 4], "split-kv-merge",
     ["the two calls split KV and run 2 merge kernel(s) (185.8 µs of 220.1 µs)",
      "its attention kernel takes 21.0 µs against 34.3 µs"]),
])
def test_h200_rows_give_the_measured_verdict(tmp_path, as_gpu, backend, rank, ids, cause, phrases):
    csv = f"h200_ncu_{backend.removeprefix('flashinfer-')}_raw_trimmed.csv"  # recorded as fa2 / fa3
    env = _fake_ncu(tmp_path, csv=csv, ids=ids, rank=rank, layers=1, backend=backend)
    r = cpbench("explain", *H200, "--rank", str(rank), "--backend", backend, "--out", str(tmp_path / "x"), "--json",
                env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    [v] = rep["verdicts"]
    assert v["cause"] == cause, v
    for p in phrases:
        assert p in v["sentences"][0], v["sentences"][0]
    split = rep["work_split"]["127"]
    # ncu's grids: flashinfer-fa2 launches one CTA per work item, flashinfer-fa3 one per SM
    grids = [c["grid"] for c in rep["calls"]]
    assert grids == ([split[n]["ctas"] for n in ("prev", "next", "fused")] if backend == "flashinfer-fa2" else [132] * 3)
    want_tiles = {"flashinfer-fa3": (192, 96), "flashinfer-fa2": (128, 64)}[backend]
    assert split["prev"]["config"]["backend"] == backend.removeprefix("flashinfer-")  # FlashInfer's template
    for name in ("prev", "next", "fused"):
        assert split[name]["tiles_from"] == "kernel name"
        assert (split[name]["config"]["cta_tile_q"], split[name]["config"]["cta_tile_kv"]) == want_tiles


def test_fused_order_reaches_the_child_and_the_work_split(tmp_path, as_gpu):
    r = cpbench("explain", *CELL, "--fused-order", "next-prev", "--out", str(tmp_path / "x"), "--json",
                env=_fake_ncu(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["fused_order"] == "next-prev"
    fused = rep["work_split"]["-1"]["fused"]["segments"]
    assert [(s["label"], s["q_len"], s["kv_len"]) for s in fused] == [("next[0]", 256, 2048), ("prev[0]", 256, 256)]
    assert "--fused-order next-prev" in (tmp_path / "x" / "ncu_output.txt").read_text()  # the child got it
