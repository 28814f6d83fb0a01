"""The typed data model: a cell's key (domain.cells.CellKey), the modes (domain.modes) and a results row
(results.rows.Row) that refuses a field the schema does not have where it is set."""

import json
import pickle

import pytest
import torch

from cpbench.domain.cells import Batch, CellSpec, plan_cells
from cpbench.domain.modes import MODES, Mode, Timing
from cpbench.errors import CpbenchInputError
from cpbench.results.rows import Row, RowFieldError, make_row
from cpbench.results.schema import CELL_COLUMNS, RUN_COLUMNS, check_row
from cpbench.domain.models import get_preset
from cpbench.commands.config import SweepConfig

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


def _config(**fields):
    base = dict(model=get_preset("llama-3.1-8b"), cp_sizes=(2,), batches=(Batch.uniform([64]),), backends=("torch",),
                device=torch.device("cpu"), dtype="fp32")
    return SweepConfig(**{**base, **fields})


@pytest.mark.parametrize("fields,message", [
    ({"cp_sizes": (0,)}, "--cp values must be >= 1, got 0"),
    ({"cp_sizes": (2048,)}, "--cp values must be <= 1024, got 2048"),
    ({"batches": ()}, "no batch to measure"),
    ({"batches": (Batch((0,), (0,)),)}, "--extend-len values must be >= 1, got 0"),
    ({"backends": ("fa9",)}, "fa9"),
    ({"modes": ("triple",)}, "--mode: 'triple' is not one of two-call, fused"),
    ({"timings": ("graph",)}, "--timing graph (or both) needs a CUDA device"),
    ({"budget_ms": float("nan")}, "--budget-ms must be a finite number of ms > 0, got nan"),
    ({"rel_ci": 1.5}, "--rel-ci must be a fraction in [0, 1)"),
    ({"warmup": -1}, "--warmup must be >= 0 untimed forwards, got -1"),
    ({"passes": 11}, "--passes must be an integer in [1, 10], got 11"),
    ({"context_len": 10}, "--context-len 10 is shorter than the longest sequence (64 tokens with prefix)"),
    ({"fused_order": "random"}, "unknown --fused-order 'random'"),
    ({"cp_min_extend": "bogus"}, "--cp-min-extend"),
    ({"ep": 2}, "--ep, --layer-rest-us and --graph-buckets size the breakable forward"),
    ({"dtype": "int8"}, "--dtype: 'int8' is not one of bf16, fp16, fp32"),
    ({"rel_ci": "0.01"}, "--rel-ci must be a fraction in [0, 1)"),
    ({"cp_sizes": None}, "--cp must be a list or tuple, got None"),
    ({"check": "no"}, "--check must be True or False, got 'no'"),
    ({"budget_ms": True}, "--budget-ms must be a finite number of ms > 0, got True"),
    ({"context_len": float("nan")}, "--context-len must be an integer, got nan"),
    ({"ranks": (5,)}, "--ranks [5] must name ranks in [0, cp_size) for cp_size 2"),
])
def test_a_sweep_config_built_from_python_is_checked_like_the_cli(fields, message):
    with pytest.raises(CpbenchInputError) as e:
        _config(**fields)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_sweep_config_normalises_text_to_its_types():
    assert _config(modes="both,cp-native", device="cpu").modes == (Mode.TWO_CALL, Mode.FUSED, Mode.CP_NATIVE)
    cfg = _config(modes=["fused"], timings=["eager"], backends="torch", cp_min_extend=None, cp_min_tokens=None)
    assert cfg.modes == (Mode.FUSED,) and type(cfg.modes[0]) is Mode and cfg.timings == (Timing.EAGER,)
    assert cfg.backends == ("torch",) and cfg.backend == "torch" and cfg.dtype == "fp32"
    assert (cfg.cp_min_extend, cfg.cp_min_tokens, cfg.cp_rule.need(4)) == ("pr", 0, 8)
    with pytest.raises(CpbenchInputError, match="--cp values must be"):
        cfg.replace(cp_sizes=(2, -4))
