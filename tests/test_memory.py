"""Memory accounting (measure/memory.py): per-kind setup bytes, the forward's peak, NaN with a reason on CPU."""

import math

import pytest
import torch

from cpbench.measure import memory
from cpbench.measure.memory import CPU_REASON, SETUP_PARTS, SetupMemory, memory_columns


class _FakeAllocator:
    """``torch.cuda.memory_allocated`` / ``max_memory_allocated`` driven by explicit alloc/free calls."""

    def __init__(self, start: int = 1000) -> None:
        self.now = self.peak = start

    def alloc(self, n: int) -> None:
        self.now += n
        self.peak = max(self.peak, self.now)

    def free(self, n: int) -> None:
        self.now -= n


@pytest.fixture
def fake_cuda(monkeypatch):
    a = _FakeAllocator()
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: a.now)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev=None: a.peak)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: None)

    def reset(dev=None):
        a.peak = a.now
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    return a


def test_setup_parts_total_and_transient_from_allocator_deltas(fake_cuda):
    with SetupMemory(torch.device("cuda")) as mem:
        fake_cuda.alloc(4096)         # page table duplicate (backend part)
        fake_cuda.alloc(512)          # metadata (backend part)
        fake_cuda.alloc(10_000)       # a temporary while planning ...
        fake_cuda.free(10_000)        # ... freed again: transient, not held
        fake_cuda.alloc(256 << 20)    # the shared float workspace, first use
        with mem.part("comm"):
            fake_cuda.alloc(2048)     # all-gather buffers
        fake_cuda.alloc(100)          # something outside the named parts
    backend = {"page_table": 4096, "metadata": 512, "workspace": 256 << 20}
    out = mem.finish(backend)
    assert out["parts"] == {"page_table": 4096, "metadata": 512, "workspace": 256 << 20, "comm": 2048, "other": 100}
    assert out["total"] == 4096 + 512 + (256 << 20) + 2048 + 100
    assert out["transient"] == 0  # the 10 kB temporary peaked below the final held amount

    cols = memory_columns(out, forward_bytes=3000.0)
    assert cols["setup_mem_bytes"] == out["total"] and cols["forward_mem_bytes"] == 3000.0
    assert cols["peak_mem_bytes"] == out["total"] + 3000
    assert cols["setup_mem_plan"] == 0.0 and cols["setup_mem_comm"] == 2048.0 and cols["mem_reason"] == ""


def test_a_reused_workspace_is_still_counted_as_held_but_not_as_other(fake_cuda):
    with SetupMemory(torch.device("cuda")) as mem:
        fake_cuda.alloc(700)  # outputs; the workspace exists from an earlier setup
    out = mem.finish({"outputs": 700, "workspace": 1 << 20})
    assert out["parts"]["other"] == 0 and out["total"] == 700 + (1 << 20)


def test_setup_transient_peak_counts_when_larger_than_the_forward(fake_cuda):
    with SetupMemory(torch.device("cuda")) as mem:
        fake_cuda.alloc(50_000)
        fake_cuda.free(50_000)
        fake_cuda.alloc(100)
    out = mem.finish({"metadata": 100})
    assert out["transient"] == 50_000 - 100 + 0  # the peak (50 000 above start) minus what stays (100)
    assert memory_columns(out, 10.0)["peak_mem_bytes"] == 100 + (50_000 - 100)


def test_cpu_memory_is_nan_with_a_reason_never_zero():
    with SetupMemory(torch.device("cpu")) as mem:
        torch.zeros(1000)
    assert mem.finish({"metadata": 5}) is None
    cols = memory_columns(None, math.nan)
    assert set(cols) == {f"setup_mem_{k}" for k in SETUP_PARTS} | {
        "setup_mem_bytes", "forward_mem_bytes", "peak_mem_bytes", "mem_reason"}
    assert all(math.isnan(v) for k, v in cols.items() if k != "mem_reason")
    assert cols["mem_reason"] == CPU_REASON == memory.CPU_REASON


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_setup_memory_by_part_is_measured():
    """On a GPU the fused setup holds its duplicated page table (allocator-rounded) and the outputs, the
    two-call setup no duplicate; every part is a measured, non-negative byte count."""
    from cpbench.kernels.backends.torch_ref import TorchBackend
    from cpbench.domain.geometry import rank_geometry
    from cpbench.domain.models import get_preset, with_overrides
    from cpbench.kernels.workload import build_cell, rank_work

    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=64, page_size=16)
    cell = build_cell(model, [1000, 3000], [0, 0], page_size=16, dtype=torch.bfloat16, device="cuda")
    work = rank_work(cell, rank_geometry([1000, 3000], [0, 0], 4, 1))
    fused = TorchBackend().prepare(work, "fused").setup_mem
    two = TorchBackend().prepare(work, "two-call").setup_mem
    table = cell.block_tables.numel() * cell.block_tables.element_size()  # [bs, W] int32
    assert fused["page_table"] == -(-2 * table // 512) * 512  # [2*bs, W], in 512-byte allocator blocks
    assert two["page_table"] == 0
    out_bytes = 2 * work.q.numel() * work.q.element_size()  # one output per layer kind (window, full)
    assert fused["outputs"] == two["outputs"] >= out_bytes
    assert all(v >= 0 for v in (*fused.values(), *two.values()))


def test_the_forwards_peak_leaves_out_the_copies_the_breakable_check_keeps(fake_cuda):
    """measure/rank._first_forward copies the outputs for the breakable check after reading the forward's peak:
    the copies are the check's memory, not the forward's (they once inflated forward_mem_bytes by the outputs)."""
    from types import SimpleNamespace

    from cpbench.measure.rank import _first_forward

    class Output:  # an output whose copy allocates 5000 bytes
        def clone(self):
            fake_cuda.alloc(5000)
            return "copy"

    def forward():  # 300 bytes of transient work, freed
        fake_cuda.alloc(300)
        fake_cuda.free(300)

    prep = SimpleNamespace(setup_us={}, forward=forward, local_outputs=lambda: {-1: Output()})
    job = SimpleNamespace(device=torch.device("cuda"), clock=SimpleNamespace(sync=lambda: None), check=False)
    kept: dict = {}
    setup = {"parts": {}, "total": 0, "transient": 0}
    cols = _first_forward(job, SimpleNamespace(), prep, setup, None, kept)
    assert cols["forward_mem_bytes"] == 300.0 and cols["peak_mem_bytes"] == 300.0 and kept == {-1: "copy"}
