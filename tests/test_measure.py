"""measure_rank (cpbench.measure.rank) called directly: one rank of a tiny CPU cell (torch backend, fp32,
2 layers) with a LocalGroup gives one measured row per todo entry; with a group whose agreement reports
another rank's failure, every row carries that failure (how a failing remote rank fails the cell on
every rank)."""

import math

import pandas as pd
import pytest
import torch

from cpbench.kernels.backends import get_backend
from cpbench.kernels.check import TOLERANCE
from cpbench.domain.cells import CellSpec
from cpbench.domain.geometry import all_ranks
from cpbench.kernels.kv import table_bytes
from cpbench.measure.rank import RankJob, measure_rank
from cpbench.domain.models import get_preset, with_overrides
from cpbench.ranks.group import LocalGroup
from cpbench.results.derived import derive
from cpbench.results.policy import TimingPolicy
from cpbench.results.schema import SCHEMA_VERSION, check_row
from cpbench.measure.timing import Clock
from cpbench.kernels.workload import build_cell, rank_work

CPU = torch.device("cpu")
LAYERS = 2
EXTEND = (64,)
CP = 2
BOOM = ("error", "rank 1: boom")


@pytest.fixture(scope="module")
def cell():
    model = with_overrides(get_preset("gpt-oss-120b"), layers=LAYERS, heads=8, kv_heads=2, head_dim=16, page_size=16)
    inputs = build_cell(model, EXTEND, (0,), page_size=16, dtype=torch.float32, device=CPU, seed=0)
    return model, inputs, all_ranks(EXTEND, (0,), CP)


def _job(model, inputs, todo, **kw) -> RankJob:
    key = CellSpec(CP, tuple(EXTEND), (0,) * len(EXTEND)).key()
    base = dict(schema_version=SCHEMA_VERSION, model=model.name, backend="torch", dtype="fp32", launch="simulated",
                world_size=1, seed=0, gather="none", **key.row_columns(), page_size=16, num_layers=LAYERS, tp_size=1)
    shared = dict(page_table_bytes=table_bytes(inputs.block_tables), kv_cache_bytes=inputs.kv_cache_bytes,
                  context_len=inputs.context_len, kv_buffers=len(inputs.kv_buffers), dup_copy_us=1.5)
    return RankJob(get_backend("torch"), Clock(CPU), CPU, "fp32", base, key, shared, list(todo), f"cp{CP} bs1 extend64",
                   timing=TimingPolicy(warmup=kw.pop("warmup", 0), budget_ms=5.0), **kw)


@pytest.mark.parametrize("rank", [0, 1])
def test_measure_rank_with_a_local_group(cell, rank):
    model, inputs, geoms = cell
    todo = [("fused", "eager"), ("two-call", "eager")]
    rows = measure_rank(_job(model, inputs, todo), rank_work(inputs, geoms[rank]), LocalGroup())
    assert len(rows) == len(todo)
    assert [(r["rank"], r["mode"], r["timing"]) for r in rows] == [(rank, m, t) for m, t in todo]
    calls = {"two-call": 2, "fused": 1}
    for r in rows:
        assert check_row(r) == [], check_row(r)
        assert (r["status"], r["reason"]) == ("ok", "")
        assert r["calls_per_layer"] == calls[r["mode"]]
        assert r["attn_kernels"] == r["attn_kernels_expected"] == LAYERS * calls[r["mode"]]
        assert r["attn_calls"] == LAYERS * calls[r["mode"]] and r["kernels_per_call"] == 1
        assert r["n_samples"] == len(r["samples_us"]) >= 3 and all(x > 0 for x in r["samples_us"])
        assert r["latency_us_p10"] <= r["latency_us_median"] <= r["latency_us_p90"]
        assert r["max_abs_err"] <= TOLERANCE[torch.float32]
        assert r["tokens_logical"] == geoms[rank].tokens_logical and r["num_layers"] == LAYERS
        assert r["flops"] == rows[0]["flops"] > 0  # flops: the cell's work, the same per mode
        assert math.isnan(r["host_launch_us"]) and math.isnan(r["peak_mem_bytes"])  # NaN on CPU (schema)
        assert math.isnan(r["setup_mem_bytes"]) and r["mem_reason"].startswith("not measured on CPU")
        assert {"setup_us_total", "setup_us_metadata"} <= set(r) and r["setup_us_total"] >= 0
    read = derive(pd.DataFrame(rows)).to_dict("records")  # the columns a reader derives from these rows
    for r in read:
        assert r["per_layer_us"] == pytest.approx(r["latency_us_median"] / LAYERS)
        assert r["tflops"] == pytest.approx(r["flops"] / r["latency_us_median"] / 1e6) and r["tflops"] > 0
    fused = read[0]
    assert fused["diff_vs_two_call"] == 0  # the torch reference: fused == two-call exactly
    assert fused["page_table_dup_bytes"] == 2 * fused["page_table_bytes"] and fused["dup_copy_us"] == 1.5
    assert read[1]["page_table_dup_bytes"] == 0 and read[1]["dup_copy_us"] == 0.0


def test_measure_rank_only_the_todo_entries(cell):
    model, inputs, geoms = cell
    rows = measure_rank(_job(model, inputs, [("two-call", "eager")], profile=False, check=False),
                        rank_work(inputs, geoms[1]), LocalGroup())
    assert len(rows) == 1 and (rows[0]["rank"], rows[0]["mode"], rows[0]["status"]) == (1, "two-call", "ok")
    assert "attn_kernels" not in rows[0] and math.isnan(rows[0]["max_abs_err"])  # not profiled, not checked
    assert "diff_vs_two_call" not in rows[0]


class FailingRemote(LocalGroup):
    """A group in which another rank (rank 1) failed: every agreement returns its error."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def agree_status(self, status):
        self.calls.append(status)
        return BOOM


def test_a_failing_remote_rank_fails_every_row(cell):
    model, inputs, geoms = cell
    todo = [("two-call", "eager"), ("fused", "eager")]
    group = FailingRemote()
    rows = measure_rank(_job(model, inputs, todo), rank_work(inputs, geoms[0]), group)
    assert len(rows) == len(todo)
    assert [(r["rank"], r["mode"], r["timing"]) for r in rows] == [(0, m, t) for m, t in todo]
    for r in rows:
        assert (r["status"], r["reason"]) == BOOM
        assert "latency_us_median" not in r and "samples_us" not in r  # nothing was timed
        assert check_row(r) == [] and r["cp_size"] == CP and r["dtype"] == "fp32"
    assert len(group.calls) >= len(todo) and group.calls[0] == ("ok", "")  # this rank itself was fine


class FailsAtTiming(LocalGroup):
    """Rank 1 fails while timing: agreements are ok until the timing loop has agreed its repeat counts."""

    def __init__(self):
        super().__init__()
        self.timing_started = False

    def agree(self, value):
        self.timing_started = True
        return value

    def agree_status(self, status):
        return BOOM if self.timing_started else status


def test_a_remote_failure_while_timing_fails_every_row(cell):
    model, inputs, geoms = cell
    todo = [("two-call", "eager"), ("fused", "eager")]
    group = FailsAtTiming()
    rows = measure_rank(_job(model, inputs, todo, warmup=2), rank_work(inputs, geoms[1]), group)
    assert group.timing_started
    assert [(r["mode"], r["status"], r["reason"]) for r in rows] == [(m, *BOOM) for m, _ in todo]
    assert all("latency_us_median" not in r for r in rows)  # samples taken locally are dropped
