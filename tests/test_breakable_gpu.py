"""The breakable forward on a GPU: segments replayed from CUDA graphs around eager attention leave the
attention outputs equal to the eager forward's, fused == two-call, on every rank; a sweep with
``--timing breakable`` writes rows whose segments ran as graphs and whose critical path sums the slowest
rank per layer kind.

`python -m pytest -q -n 0 -m gpu tests/test_breakable_gpu.py` (skipped without CUDA and flashinfer).
"""

import time

import pytest
import torch

from cpbench.kernels.backends import get_backend
from cpbench.kernels.check import max_abs_diff, max_diff_outputs
from cpbench.studies.breakable.layers import breakable_layers, run_layers
from cpbench.studies.breakable.rest import build_layer_rest
from cpbench.studies.breakable.stream import run_chunk, spin_cycles_per_us
from cpbench.measure.timing import Clock, release_graphs
from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work

pytestmark = pytest.mark.gpu


def _backends() -> list[str]:
    if not torch.cuda.is_available():
        return []
    spec = get_preset("gpt-oss-120b")
    return [b for b in ("trtllm-fmha-v2", "flashinfer-fa3", "torch")
            if get_backend(b).supports(torch.device("cuda"), spec, torch.bfloat16) is None]


@pytest.mark.skipif(not _backends(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["trtllm-fmha-v2", "flashinfer-fa3", "torch"])
@pytest.mark.parametrize("capture", [None, (2, 3)])  # (2, 3): --forward-layers kinds captures its rotation only
def test_breakable_outputs_equal_eager_and_fused_equals_two_call(backend, capture):
    if backend not in _backends():
        pytest.skip(f"{backend} cannot run here")
    spec = with_overrides(get_preset("gpt-oss-120b"), layers=4)
    ext, pre, cp = [2048, 1000], [0, 64], 4
    cell = build_cell(spec, ext, pre, page_size=64, dtype=torch.bfloat16, device="cuda", seed=1)
    geoms = all_ranks(ext, pre, cp)
    rest = build_layer_rest(spec, geoms[0].tokens_padded, cp, tp_size=1, ep=None, layer_rest_us=None, buckets=(),
                            device=torch.device("cuda"), dtype=torch.bfloat16, seed=0)
    assert rest.graphs and rest.columns["segments"] == "graph" and rest.columns["ep_size"] == 4
    be = get_backend(backend)
    try:
        for g in geoms:
            work = rank_work(cell, g)
            out = {}
            for mode in ("two-call", "fused"):
                prep = be.prepare(work, mode)
                prep.forward()
                torch.cuda.synchronize()
                eager = {w: o.clone() for w, o in prep.local_outputs().items()}
                for o in prep.outputs.values():
                    o.fill_(float("nan"))  # the breakable forward must write every output row again
                layers = breakable_layers(prep, rest, capture)
                assert len(layers) == 4 and all(len(x) == (2 if mode == "fused" else 3) + 1 for x in layers)
                run_layers(layers)
                torch.cuda.synchronize()
                assert max_diff_outputs(prep.local_outputs(), eager) == 0.0, f"rank {g.rank} {mode}"
                out[mode] = prep
            assert max_abs_diff(out["fused"], out["two-call"]) <= (0.0 if backend != "torch" else 1e-2)
        # one capture of each segment served every rank and mode (before and after attention, per layer)
        assert len(rest.segments) == 2 * (4 if capture is None else len(capture))
    finally:
        rest.release()
        release_graphs()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_chunk_behind_a_spin_times_each_layer_without_the_hosts_issue_time():
    """Layers back to back behind a GPU spin longer than the host's issue time: each sample is the GPU's time for
    the layer (a forward's steady state); without the spin the first one holds the host's 2 ms pause."""
    clock = Clock(torch.device("cuda"))
    x = torch.zeros(1024, device="cuda")

    def work() -> None:  # two tiny kernels with 2 ms of host work between them
        x.add_(1)
        time.sleep(0.002)
        x.add_(1)

    work()
    assert 100 < spin_cycles_per_us() < 10_000  # SM clock cycles per µs (MHz)
    bare, host = run_chunk([work] * 3, clock, lead_us=0.0)
    assert bare[0] >= 2000.0 and min(host) >= 2000.0
    led, _ = run_chunk([work] * 3, clock, lead_us=20_000.0)
    assert max(led) < 500.0, f"{led} µs: the spin did not hide the host's issue time"
