"""The report's Precision section (report/precision.py) on synthetic rows."""

import math

import pandas as pd
import pytest

from cpbench.report.precision import clock_swing, precision_numbers, precision_section


def _rows():
    rows = pd.DataFrame([
        # precise rows: clock steady
        dict(status="ok", host_bound=False, ci_rel_width=0.004, sm_clock_mhz_min=1970.0, sm_clock_mhz_max=1980.0),
        dict(status="ok", host_bound=False, ci_rel_width=0.009, sm_clock_mhz_min=1960.0, sm_clock_mhz_max=1980.0),
        # wide rows: the clock moved
        dict(status="ok", host_bound=False, ci_rel_width=0.03, sm_clock_mhz_min=1800.0, sm_clock_mhz_max=1980.0),
        dict(status="ok", host_bound=False, ci_rel_width=0.05, sm_clock_mhz_min=1782.0, sm_clock_mhz_max=1980.0),
        # left out: host-bound, and not ok
        dict(status="ok", host_bound=True, ci_rel_width=0.2, sm_clock_mhz_min=1980.0, sm_clock_mhz_max=1980.0),
        dict(status="skipped", host_bound=None, ci_rel_width=math.nan, sm_clock_mhz_min=math.nan,
             sm_clock_mhz_max=math.nan),
    ])
    rows["gpu_busy_us"] = 1000.0  # a GPU run's eager rows carry their GPU busy time
    return rows


def test_clock_swing_fraction_and_unknown():
    s = clock_swing(_rows())
    assert s.iloc[2] == (1980 - 1800) / 1980 and math.isnan(s.iloc[5])
    assert clock_swing(pd.DataFrame({"x": [1]})).isna().all()  # older runs: no clock columns


def test_precision_numbers_counts_widths_and_clock_swing():
    n = precision_numbers(_rows(), {"config": {"rel_ci": 0.01}})
    assert (n["target"], n["rows"], n["host_bound"], n["met"]) == (0.01, 4, 1, 2)  # host-bound and skipped left out
    assert n["width"] == (0.04, 0.05)  # the two that stopped at the budget: median, widest
    swings = [(1980 - 1800) / 1980, (1980 - 1782) / 1980]  # 9.1 % and 10.0 % against 0.5 % and 1.0 %
    assert n["swing_missed"] == (pytest.approx(sum(swings) / 2), pytest.approx(max(swings)))
    assert n["swing_met"] == pytest.approx((10 / 1980 + 20 / 1980) / 2)
    text = "\n".join(precision_section(_rows(), {"config": {"rel_ci": 0.01}}))
    for figure in ("**2 of 4**", "1 host-bound", "4.0 %", "5.0 %", "9.5 %", "10.0 %", "0.8 %"):
        assert figure in text, figure  # the section states each number, formatted from precision_numbers


def test_precision_numbers_use_the_runs_target_and_say_nothing_on_cpu():
    n = precision_numbers(_rows(), {"config": {"rel_ci": 0.05}})
    assert (n["met"], n["rows"]) == (4, 4) and all(math.isnan(x) for x in n["width"])
    assert "The other" not in "\n".join(precision_section(_rows(), {"config": {"rel_ci": 0.05}}))
    assert precision_section(_rows(), {}, cpu=True) == [] and precision_numbers(_rows(), {}, cpu=True) is None
    assert precision_section(pd.DataFrame({"status": ["ok"]}), {}) == []  # no ci_rel_width column


def test_precision_numbers_without_a_target_or_gpu_time_and_with_hand_edited_values():
    n = precision_numbers(_rows(), {"config": {"rel_ci": None}})  # --rel-ci 0
    assert n["target"] is None and n["rows"] == 4 and n["width"] == (pytest.approx(0.0195), 0.05)
    cpu_like = _rows().assign(gpu_busy_us=math.nan)  # a CPU run whose manifest was deleted
    assert precision_section(cpu_like, {}) == [] and precision_numbers(cpu_like, {}) is None
    odd = _rows()
    odd.loc[3, ["sm_clock_mhz_min", "sm_clock_mhz_max"]] = [1980.0, 100.0]  # min > max: unknown swing
    odd.loc[0, "ci_rel_width"] = -0.5  # a negative width is left out, not counted as met
    n = precision_numbers(odd, {"config": {"rel_ci": 0.01}})
    assert (n["met"], n["rows"]) == (1, 3)
    assert n["swing_missed"] == (pytest.approx(180 / 1980), pytest.approx(180 / 1980))  # row 3's swing unknown
    assert n["swing_met"] == pytest.approx(20 / 1980)
    assert "nan" not in "\n".join(precision_section(odd, {"config": {"rel_ci": 0.01}}))
