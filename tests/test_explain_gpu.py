"""`cpbench explain` on a Hopper GPU (skipped without one): the child's forwards, and the whole command
under Nsight Compute where ncu is on PATH and may read the counters."""

import json
import shutil

import pytest
import torch

from cpbench.studies.explain.measure import CHILD_FILE, run_explain_child
from cpbench.domain.models import get_preset, with_overrides
from cpbench.domain.cells import CellSpec
from clirun import cpbench

pytestmark = pytest.mark.gpu


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.parametrize("backend", ["flashinfer-fa2", "flashinfer-fa3"])
@pytest.mark.parametrize("order", ["prev-next", "interleaved"])
@pytest.mark.parametrize("timing", ["eager", "graph"])
def test_child_runs_both_modes_once(tmp_path, backend, order, timing):
    if not _hopper():
        pytest.skip("needs an sm90 GPU (flashinfer-fa3)")
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2)
    info = run_explain_child(model, CellSpec(4, (2048,), (0,)), 0, backend=backend, device=torch.device("cuda"),
                             dtype="bf16", timing=timing, fused_order=order, out_dir=tmp_path)
    assert info["calls"] == {"two-call": ["prev", "next", "prev", "next"], "fused": ["combined", "combined"]}
    assert info["diff_vs_two_call"] is not None and info["diff_vs_two_call"] <= 2 ** -7
    assert all(e is not None and e < 2e-2 for e in info["max_abs_err"].values())  # the bf16 tolerance
    assert json.loads((tmp_path / CHILD_FILE).read_text()) == info


@pytest.mark.parametrize("backend, rank", [("flashinfer-fa3", 0), ("flashinfer-fa3", 3), ("flashinfer-fa2", 0)])
def test_explain_under_ncu(tmp_path, backend, rank):
    if not _hopper() or shutil.which("ncu") is None:
        pytest.skip("needs an sm90 GPU and ncu on PATH")
    r = cpbench("explain", "--cp", "4", "--bs", "1", "--seq", "2048", "--rank", str(rank), "--backend", backend,
                "--out", str(tmp_path / "x"), "--json")
    if r.returncode == 2 and "ERR_NVGPUCTRPERM" in r.stderr:
        pytest.skip("ncu may not read the GPU counters here")
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert [c["call"] for c in rep["calls"]] == ["prev", "next", "prev", "next", "combined", "combined"]
    assert all(c["duration"] > 0 and c["grid"] > 0 for c in rep["calls"])
    assert len(rep["verdicts"]) == 2 and all(v["sentences"] for v in rep["verdicts"])
    if backend == "flashinfer-fa2":
        assert sum(c["merge_kernels"] for c in rep["calls"] if c["mode"] == "fused") == 0
