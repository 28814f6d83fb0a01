"""One cell-preparation path (commands/prepare.CellPrep): sweep, profile and explain prepare the same forward of the
same cell and rank. A spy on the torch reference's ``prepare`` records what each command hands it; the cell's
tensors, the rank's work and the prepared forward's tensors must be equal, so a command that built its cells
its own way (another seed, page table, context length, fused order or SWA pool) fails here."""

from types import SimpleNamespace

import pytest
import torch

from cpbench.domain.cells import Batch, CellSpec
from cpbench.domain.models import get_preset, with_overrides
from cpbench.errors import CpbenchInputError
from cpbench.kernels.backends.torch_ref import TorchBackend
from cpbench.commands.prepare import CellPrep

CPU = torch.device("cpu")
MODEL = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=1, head_dim=16, page_size=16)
BATCH = Batch((40, 24), (16, 0))  # two requests, one with a cached prefix
CELL = CellSpec(2, BATCH.extend_lens, BATCH.prefix_lens)


@pytest.fixture
def spy(monkeypatch):
    """``{command: {(rank, mode): (work, prepared)}}``, filled by every ``TorchBackend.prepare`` call while
    ``spy.command`` names the command running."""
    seen: dict = {}
    real = TorchBackend.prepare
    box = SimpleNamespace(command=None, seen=seen)

    def prepare(self, work, mode):
        prep = real(self, work, mode)
        seen.setdefault(box.command, {}).setdefault((work.geometry.rank, str(mode)), (work, prep))
        return prep

    monkeypatch.setattr(TorchBackend, "prepare", prepare)
    return box


def _sweep(spy, **fields) -> None:
    from cpbench.commands.config import SweepConfig
    from cpbench.commands.runner import Runner

    cfg = SweepConfig(model=MODEL, cp_sizes=(CELL.cp_size,), batches=(BATCH,), backends=("torch",), device=CPU,
                      timings=("eager",), budget_ms=1.0, warmup=0, rel_ci=None, dtype="fp32", check=False,
                      profile=False, **fields)
    spy.command = "sweep"
    rows: list = []
    Runner(cfg, rows.extend).run_cell(CELL)
    assert {r["status"] for r in rows} == {"ok"}, rows


def _same(a, b, what: str) -> None:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), what
        assert (a.shape, a.dtype) == (b.shape, b.dtype) and torch.equal(a, b), what
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            _same(a[k], b[k], f"{what}[{k}]")
    else:
        assert a == b, what


def _assert_same_forwards(spy, one: str, other: str) -> None:
    a, b = spy.seen[one], spy.seen[other]
    assert a.keys() == b.keys() and a, (one, sorted(a), other, sorted(b))
    for key in a:
        (wa, pa), (wb, pb) = a[key], b[key]
        what = f"{one} vs {other} {key}"
        assert wa.geometry == wb.geometry and wa.fused_order == wb.fused_order, what
        _same(wa.q, wb.q, f"{what} q")
        _same(wa.token_index, wb.token_index, f"{what} token_index")
        ca, cb = wa.cell, wb.cell
        for name in ("q_all", "q_offsets", "kv_buffers", "layer_buffer", "block_tables", "sinks", "swa_block_tables",
                     "swa_kv_buffers", "swa_layer_buffer", "page_size", "context_len", "kv_cache_bytes"):
            _same(getattr(ca, name), getattr(cb, name), f"{what} cell.{name}")
        assert [[s.name for s in layer] for layer in pa.layers] == [[s.name for s in layer] for layer in pb.layers], what
        _same(pa.row_order, pb.row_order, f"{what} row_order")
        _same(pa.held, pb.held, f"{what} held")  # the SWA pool's (duplicated) table
        pa.forward()
        pb.forward()
        _same(pa.local_outputs(), pb.local_outputs(), f"{what} outputs")


def test_profile_prepares_the_forwards_a_sweep_prepares(spy):
    from cpbench.commands.profiling import profile_cell

    _sweep(spy)
    spy.command = "profile"
    rows = profile_cell(MODEL, CELL, backend="torch", device=CPU, dtype="fp32")
    assert len(rows) == 2 * CELL.cp_size
    _assert_same_forwards(spy, "sweep", "profile")


def test_explain_prepares_the_forward_a_sweep_prepares(spy, tmp_path, monkeypatch):
    """explain's child (run under ncu on a GPU) with the CUDA calls made no-ops: rank 1 in the next-prev order and
    another seed, as the sweep's rank 1 with the same options."""
    from cpbench.profiles import ranges
    from cpbench.studies.explain.measure import run_explain_child

    _sweep(spy, fused_order="next-prev", seed=7)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(multi_processor_count=1))
    monkeypatch.setattr(ranges, "annotated_forward", lambda prep, *a, **kw: prep.forward)
    spy.command = "explain"
    info = run_explain_child(MODEL, CELL, 1, backend="torch", device=CPU, dtype="fp32", timing="eager",
                             fused_order="next-prev", out_dir=tmp_path, seed=7)
    assert info["calls"]["fused"] == ["combined"] * MODEL.num_layers
    spy.seen["sweep"] = {k: v for k, v in spy.seen["sweep"].items() if k[0] == 1}
    _assert_same_forwards(spy, "sweep", "explain")


@pytest.mark.parametrize("fields", [dict(swa_pool=True), dict(context_len=128, seed=3, fused_order="next-prev")])
def test_a_sweeps_preparation_options_reach_its_forwards(spy, fields):
    """Every preparation field of a SweepConfig (SWA pool, context length, seed, fused order) reaches the sweep's
    forwards, as CellPrep with the same fields prepares them."""
    _sweep(spy, **fields)
    spy.command = "prep"
    prep = CellPrep(MODEL, CPU, "fp32", **fields)
    assert len(list(prep.forwards(CELL, "torch"))) == 2 * CELL.cp_size
    _assert_same_forwards(spy, "sweep", "prep")
    assert (spy.seen["prep"][(0, "fused")][0].cell.swa_block_tables is not None) == fields.get("swa_pool", False)


@pytest.mark.parametrize("cell, backend, ranks, needle", [
    (CellSpec(4, (6,), (0,)), "torch", None, "cp4 bs1 extend6 is not CP-eligible"),
    (CELL, "torch", [2], "--rank 2 is not a rank of cp_size 2: use 0..1"),
    (CELL, "no-such-backend", None, "no-such-backend"),
])
def test_what_cannot_be_prepared_is_refused_before_anything_is_built(cell, backend, ranks, needle, monkeypatch):
    monkeypatch.setattr(CellPrep, "inputs", lambda *a: pytest.fail("built a cell that is refused"))
    with pytest.raises(CpbenchInputError, match=needle.replace(".", r"\.").replace("-", r"\-")):
        next(CellPrep(MODEL, CPU).forwards(cell, backend, ranks))
