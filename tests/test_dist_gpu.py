"""The torchrun mode on GPUs (NCCL): run on a machine with 2 GPUs and flashinfer (skipped elsewhere).
Outputs with the per-layer K|V all-gather equal the simulated outputs bit for bit (flashinfer-fa3, bf16), and the
NCCL gather restores every rank's paged cache exactly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).parent / "dist_scripts"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")]


def _torchrun(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           *map(str, args)], capture_output=True, text=True, env=env, timeout=400)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("gather", ["packed", "separate"])
def test_fa3_outputs_with_the_nccl_all_gather_equal_the_simulated_outputs(gather):
    pytest.importorskip("flashinfer")
    p = _torchrun(SCRIPTS / "outputs_check.py", gather, "flashinfer-fa3")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(out["equal"]) == 8 and all(out["equal"].values()), out


@pytest.mark.timeout(120)
def test_nccl_gather_writes_the_paged_cache_exactly():
    p = _torchrun(SCRIPTS / "kv_gather_check.py", "--backend", "nccl")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["helpers_ok"] and len(out["rows"]) == 6
