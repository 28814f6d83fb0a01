"""The typed data model: a cell's key (domain.cells.CellKey), the modes (domain.modes) and a results row
(results.rows.Row) that refuses a field the schema does not have where it is set."""

import json
import pickle

import pytest

from cpbench.domain.cells import Batch, CellSpec, plan_cells
from cpbench.domain.modes import MODES, Mode, Timing
from cpbench.errors import CpbenchInputError
from cpbench.results.rows import Row, RowFieldError, make_row
from cpbench.results.schema import CELL_COLUMNS, RUN_COLUMNS, check_row

pytestmark = pytest.mark.quick

KEY = CellSpec(4, (3000, 8192), (0, 512), batch=2).key()


def test_cell_key_names_the_cell_as_rows_and_json_do():
    assert (KEY.bs, KEY.max_extend_len, KEY.prefix_len) == (2, 8192, 512)
    assert KEY.row_columns() == {"cp_size": 4, "bs": 2, "max_extend_len": 8192, "prefix_len": 512,
                                 "extend_lens": "3000,8192", "batch": 2, "prefix_lens": "0,512"}
    assert KEY.as_json(rank=1) == {"cp_size": 4, "bs": 2, "max_extend_len": 8192, "extend_lens": [3000, 8192],
                                   "rank": 1}
    # every cell column but timing (a row column of the cell) comes from the key
    assert set(CELL_COLUMNS) - set(RUN_COLUMNS) - {"timing"} <= set(KEY.row_columns())
    with pytest.raises(AttributeError):
        KEY.cp_size = 8  # frozen: a key cannot change under a dict that holds it
    assert {KEY: 1}[CellSpec(4, (3000, 8192), (0, 512), batch=2).key()] == 1


def test_plan_cells_keys_follow_cp_then_batch_order():
    keys = [c.key() for c in plan_cells([2, 4], [Batch.uniform([64]), Batch.uniform([32, 32], prefix=8, index=1)])]
    assert [(k.cp_size, k.bs, k.prefix_len, k.batch) for k in keys] == [(2, 1, 0, 0), (2, 2, 8, 1), (4, 1, 0, 0),
                                                                        (4, 2, 8, 1)]


def test_modes_are_their_strings_everywhere():
    assert MODES == ("two-call", "fused") and [m.tag for m in MODES] == ["two_call", "fused"]
    assert json.dumps({Mode.FUSED: Mode.TWO_CALL}) == '{"fused": "two-call"}'
    assert f"{Mode.TWO_CALL}/{Timing.BREAKABLE}" == "two-call/breakable"
    assert {"fused": 1}[Mode.FUSED] == 1 and Mode("fused") is Mode.FUSED
    with pytest.raises(CpbenchInputError, match="--mode: 'triple' is not one of two-call, fused"):
        Mode.parse("triple", "--mode")


def _row(**measured):
    base = dict(model="m", backend="torch", dtype="fp32", launch="simulated", world_size=1, seed=0, gather="none",
                tp_size=1, fused_order="prev-next", **KEY.row_columns(), page_size=16, num_layers=2)
    return make_row(base, rank=0, mode=Mode.FUSED, timing=Timing.EAGER, status="ok", measured=measured)


def test_a_misspelt_field_raises_where_the_row_is_made():
    row = _row(latency_us_median=12.5)
    assert check_row(row) == [] and type(row["mode"]) is str and row["mode"] == "fused"
    with pytest.raises(RowFieldError, match="unknown column 'latency_us_medain'"):
        _row(latency_us_medain=12.5)
    with pytest.raises(RowFieldError, match="unknown column 'lantency'"):
        row["lantency"] = 1.0
    with pytest.raises(RowFieldError, match="unknown column 'cp'"):
        row.update(cp=4)
    with pytest.raises(RowFieldError, match="derived on read"):
        row.setdefault("per_layer_us", 1.0)
    with pytest.raises(RowFieldError, match="is not int"):
        row["bs"] = "one"
    assert pickle.loads(pickle.dumps(row)) == row and type(pickle.loads(pickle.dumps(row))) is Row
