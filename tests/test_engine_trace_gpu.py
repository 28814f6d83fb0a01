"""``cpbench profile --from`` on traces a stand-in engine writes on the GPU (skipped without one): the
torch.profiler traces of each rank, and an nsys report of the same script (skipped without nsys)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import cpbench

pytestmark = pytest.mark.gpu
ENGINE = Path(__file__).with_name("engine_like_prefill.py")
LAYERS = 4


def engine(tmp_path, *args, prefix=()):
    subprocess.run([*prefix, sys.executable, str(ENGINE), "--cp", "2", "--bs", "2", "--extend-len", "512",
                    "--layers", str(LAYERS), "--forwards", "2", *args], check=True, timeout=300, cwd=tmp_path)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode,per_layer", [("fused", 1), ("two-call", 2)])
def test_torch_profiler_traces(tmp_path, mode, per_layer):
    engine(tmp_path, "--mode", mode, "--out", str(tmp_path / "t"), "--port", "29741" if mode == "fused" else "29742")
    r = cpbench("profile", "--from", tmp_path / "t", "--layers", LAYERS, "--json")
    assert r.returncode == 0, r.stderr
    ranks = json.loads(r.stdout)["ranks"]
    assert [x["rank"] for x in ranks] == [0, 1]
    for x in ranks:
        assert x["bound"] == "annotation" and x["forwards"] == 2
        assert x["attention_kernels_per_forward"] == [LAYERS * per_layer] * 2
        assert x["backend"] == "flashinfer-fa3"  # FlashInfer fa3 in the stand-in engine


@pytest.mark.timeout(600)
def test_nsys_report(tmp_path):
    from cpbench.profiles.nsys import find_nsys

    nsys = find_nsys()
    if nsys is None:
        pytest.skip("nsys not found")
    rep = tmp_path / "engine.nsys-rep"
    engine(tmp_path, "--mode", "fused", "--profiler", "none", "--annotate", "nvtx", "--out", str(tmp_path / "t"),
           "--port", "29743",
           prefix=(nsys, "profile", "--trace", "cuda,nvtx", "--sample", "none", "--cpuctxsw", "none",
                   "--force-overwrite", "true", "-o", str(rep.with_suffix(""))))
    r = cpbench("profile", "--from", rep, "--layers", LAYERS, "--forward-range", "prefill_forward", "--json")
    assert r.returncode == 0, r.stderr
    ranks = json.loads(r.stdout)["ranks"]
    assert len(ranks) == 2
    for x in ranks:
        assert x["source"] == "nsys" and x["bound"] == "annotation"
        assert x["attention_kernels_per_forward"] == [LAYERS] * 2
