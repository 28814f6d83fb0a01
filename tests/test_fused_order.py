"""Fused segment orders (--fused-order): every order gives two-call's outputs on the torch backend,
with the geometry, the page table and the row permutation each order implies."""

import math

import pytest
import torch

from cpbench.kernels.backends.base import call_rows
from cpbench.kernels.backends.torch_ref import TorchBackend, sequence_reference
from cpbench.kernels.check import max_abs_diff, max_abs_error
from cpbench.domain.geometry import FUSED_ORDERS, all_ranks, rank_geometry
from cpbench.kernels.kv import duplicate_block_tables
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.errors import CpbenchInputError

MODEL = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=16, window=8)


def test_geometry_orders_case_a():
    # docs/design.md §1 case A, rank 0: q_prev [2, 2], q_next [1, 1], kv_prev [10, 16], kv_next [19, 27]
    g = rank_geometry([11, 13], [8, 14], 4, 0)
    want = {
        "prev-next": [("prev", 0, 2, 10), ("prev", 1, 2, 16), ("next", 0, 1, 19), ("next", 1, 1, 27)],
        "next-prev": [("next", 0, 1, 19), ("next", 1, 1, 27), ("prev", 0, 2, 10), ("prev", 1, 2, 16)],
        "interleaved": [("prev", 0, 2, 10), ("next", 0, 1, 19), ("prev", 1, 2, 16), ("next", 1, 1, 27)],
    }
    for order, segs in want.items():
        [(name, got)] = g.calls("fused", order)
        assert name == "combined"
        assert [(s.part, s.request, s.q_len, s.kv_len) for s in got] == segs
        assert [s.table_row for s in got] == [0, 1, 2, 3]
    with pytest.raises(CpbenchInputError, match="fused-order"):
        g.calls("fused", "random")


def test_duplicated_table_rows_follow_the_order():
    t = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    assert duplicate_block_tables(t).tolist() == [[1, 2], [3, 4], [1, 2], [3, 4]]
    assert duplicate_block_tables(t, "next-prev").tolist() == [[1, 2], [3, 4], [1, 2], [3, 4]]
    assert duplicate_block_tables(t, "interleaved").tolist() == [[1, 2], [1, 2], [3, 4], [3, 4]]


def test_call_rows_permutation():
    cell = build_cell(MODEL, [11, 13], [8, 14], page_size=4, dtype=torch.float32, device="cpu", seed=1)
    g = rank_geometry([11, 13], [8, 14], 4, 0)  # local rows: prev0 0-1, prev1 2-3, next0 4, next1 5
    for order, rows in {"prev-next": None, "next-prev": [4, 5, 0, 1, 2, 3],
                        "interleaved": [0, 1, 4, 2, 3, 5]}.items():
        work = rank_work(cell, g, order)
        q, idx = call_rows(work, g.calls("fused", order))
        if rows is None:
            assert idx is None and q is work.q
        else:
            assert idx.tolist() == rows
            assert torch.equal(q, work.q[rows])


@pytest.mark.parametrize("order", FUSED_ORDERS)
@pytest.mark.parametrize("cp", [2, 4])
def test_every_order_equals_two_call_and_reference(order, cp):
    ext, pre = [37, 64, 16], [5, 0, 20]
    cell = build_cell(MODEL, ext, pre, page_size=16, dtype=torch.float32, device="cpu", seed=7)
    truth = {w: torch.cat([sequence_reference(cell, s, MODEL.last_layer(w)) for s in range(len(ext))])
             for w in MODEL.layer_kinds}
    for g in all_ranks(ext, pre, cp):
        work = rank_work(cell, g, order)
        two = TorchBackend().prepare(work, "two-call")
        fused = TorchBackend().prepare(work, "fused")
        assert fused.calls_per_layer == 1 and two.calls_per_layer == 2  # one call per layer, any order
        assert (fused.row_order is None) == (order == "prev-next")
        two.forward()
        fused.forward()
        assert max_abs_diff(two, fused) < 2e-5
        assert max_abs_error(work, fused) < 2e-5
        for w in MODEL.layer_kinds:
            err = (fused.local_outputs()[w] - truth[w][work.token_index]).abs().max().item()
            assert err < 2e-5, (order, g.rank, w, err)


def test_unknown_order_refused():
    cell = build_cell(MODEL, [16], [0], page_size=4, dtype=torch.float32, device="cpu")
    with pytest.raises(CpbenchInputError, match="prev-next, next-prev, interleaved"):
        rank_work(cell, all_ranks([16], [0], 2)[0], "reverse")


def test_reference_rows_cached_across_modes_and_nan_never_hidden():
    ext, pre = (40, 24), (0, 8)
    cell = build_cell(MODEL, ext, pre, page_size=16, dtype=torch.float32, device="cpu", seed=3)
    work = rank_work(cell, all_ranks(ext, pre, 2)[1], "prev-next")
    two, fused = TorchBackend().prepare(work, "two-call"), TorchBackend().prepare(work, "fused")
    two.forward()
    fused.forward()
    cache: dict = {}
    e_two = max_abs_error(work, two, rows_per_end=4, cache=cache)
    n_refs = len(cache)
    # 2 layer kinds x (request 0: 10-row prev and next blocks, 2 spans each; request 1: 6-row blocks, 1 each)
    assert n_refs == 2 * (2 + 2 + 1 + 1)
    e_fused = max_abs_error(work, fused, rows_per_end=4, cache=cache)
    assert len(cache) == n_refs  # the second mode computed no new reference
    assert e_two == max_abs_error(work, two, rows_per_end=4) and e_fused == max_abs_error(work, fused, rows_per_end=4)
    assert 0 < e_two < 2e-5 and 0 <= e_fused < 2e-5
    w = next(iter(fused.outputs))
    fused.outputs[w][0, 0, 0] = float("nan")  # a NaN in one sampled row
    assert math.isnan(max_abs_error(work, fused, rows_per_end=4, cache=cache))
