"""A study's timing reaches the cell loop only as the commands hand it down (measure/method.py): the core times
eager and graph itself and every other timing through the ``TimingFactory`` it is given, once per cell, its method
shared by the cell's ranks and modes and released at the cell's end; a factory that cannot serve a cell makes that
timing's rows a status and the other timings still run; without a factory the timing is refused in one line."""

from dataclasses import dataclass, field

import pytest
import torch

from cpbench.commands.config import SweepConfig
from cpbench.commands.runner import Runner
from cpbench.domain.cells import Batch, CellSpec
from cpbench.domain.models import get_preset, with_overrides
from cpbench.domain.modes import Status, Timing
from cpbench.errors import CpbenchInputError
from cpbench.measure.method import Unavailable

MODEL = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=1, head_dim=16, page_size=16)
CELL = CellSpec(2, (40, 24), (0, 0))


def _cfg() -> SweepConfig:
    return SweepConfig(model=MODEL, cp_sizes=(2,), batches=(Batch((40, 24), (0, 0)),), backends=("torch",),
                       device=torch.device("cpu"), timings=(Timing.EAGER, Timing.BREAKABLE), budget_ms=1.0, warmup=0,
                       rel_ci=None, dtype="fp32", check=False, profile=False, layer_rest_us=0.0)


@dataclass
class CountingMethod:
    """A study's method that times each mode's plain forward and says how often it was asked."""

    timing: str = Timing.BREAKABLE
    keeps_first_outputs: bool = False
    keeps_host_samples: bool = False
    extra_flops: float = 1000.0
    columns_always: dict = field(default_factory=lambda: {"segments": "counted"})
    calls: list = field(default_factory=list)

    def callables(self, job, work, prepared, modes, group):
        self.calls.append(("callables", work.geometry.rank, tuple(modes)))
        return {m: prepared[m].forward for m in modes}, {}

    def samples(self, job, work, fns, timer):
        stop: dict = {}
        return timer(fns, stop), stop, {}

    def columns(self, job, work, mode, measured, first_outputs, prepared, group):
        return {"segments": "counted", "forward_rule": "all"}

    def release(self):
        self.calls.append(("release",))


@dataclass
class Factory:
    method: CountingMethod | None = None
    timing: str = Timing.BREAKABLE
    phase: str = "rest"
    cells: list = field(default_factory=list)

    def for_cell(self, cfg, cell, tokens_padded, group):
        self.cells.append((cell.cp_size, tokens_padded))
        if self.method is None:
            raise Unavailable(Status.SKIPPED, "the stand-in says no")
        return self.method


def _run(factory) -> list[dict]:
    rows: list = []
    Runner(_cfg(), rows.extend, timings=(factory,)).run_cell(CELL)
    return rows


def test_the_cell_loop_runs_a_study_timing_through_the_factory_it_is_handed():
    method = CountingMethod()
    factory = Factory(method)
    rows = _run(factory)
    assert factory.cells == [(2, 32)]  # once for the cell (both ranks pad to 32 rows)
    assert [c for c in method.calls if c[0] == "callables"] == [("callables", 0, ("two-call", "fused")),
                                                               ("callables", 1, ("two-call", "fused"))]
    assert method.calls[-1] == ("release",)
    study = [r for r in rows if r["timing"] == Timing.BREAKABLE]
    assert len(study) == 4 and {r["status"] for r in study} == {Status.OK}
    assert {r["segments"] for r in study} == {"counted"}
    eager = {(r["rank"], r["mode"]): r for r in rows if r["timing"] == Timing.EAGER}
    for r in study:  # the method's FLOPs beside attention are added to the row's
        assert r["flops"] == eager[(r["rank"], r["mode"])]["flops"] + 1000.0
        assert not r.get("host_samples_us")


def test_a_cell_the_study_cannot_serve_keeps_its_other_timings():
    rows = _run(Factory(None))
    study = [r for r in rows if r["timing"] == Timing.BREAKABLE]
    assert len(study) == 4 and {(r["status"], r["reason"]) for r in study} == {(Status.SKIPPED, "the stand-in says no")}
    assert {r["status"] for r in rows if r["timing"] == Timing.EAGER} == {Status.OK}


def test_a_timing_no_factory_serves_is_refused_in_one_line():
    with pytest.raises(CpbenchInputError, match=r"^--timing breakable: this command cannot time it .*eager, graph"):
        Runner(_cfg(), [].extend)
