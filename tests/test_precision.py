"""The report's Precision section (report/precision.py) on synthetic rows."""

import math

import pandas as pd

from cpbench.report.precision import clock_swing, precision_section


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


def test_precision_section_counts_and_clock_swing():
    text = "\n".join(precision_section(_rows(), {"config": {"rel_ci": 0.01}}))
    assert "**2 of 4** rows that are not host-bound got there (1 host-bound rows left out" in text
    assert "The other 2 stopped at the budget with intervals of 4.0 % (median) to 5.0 % of their median." in text
    # swings 9.1 % and 10.0 % (median 9.5 %) against 0.5 % and 1.0 % (median 0.8 %)
    assert "moved by 9.5 % (median; at most 10.0 %), against 0.8 % in the rows that met the target." in text


def test_precision_section_uses_the_runs_target_and_is_empty_on_cpu():
    text = "\n".join(precision_section(_rows(), {"config": {"rel_ci": 0.05}}))
    assert "within 5.0 % of it" in text and "**4 of 4**" in text and "The other" not in text
    assert precision_section(_rows(), {}, cpu=True) == []
    assert precision_section(pd.DataFrame({"status": ["ok"]}), {}) == []  # no ci_rel_width column


def test_precision_section_without_a_target_or_gpu_time_and_with_hand_edited_values():
    text = "\n".join(precision_section(_rows(), {"config": {"rel_ci": None}}))  # --rel-ci 0
    assert "No `--rel-ci` target was set" in text and "4 rows that are not host-bound are 1.9 % wide" in text
    cpu_like = _rows().assign(gpu_busy_us=math.nan)  # a CPU run whose manifest was deleted
    assert precision_section(cpu_like, {}) == []
    odd = _rows()
    odd.loc[3, ["sm_clock_mhz_min", "sm_clock_mhz_max"]] = [1980.0, 100.0]  # min > max: unknown swing
    odd.loc[0, "ci_rel_width"] = -0.5  # a negative width is left out, not counted as met
    text = "\n".join(precision_section(odd, {"config": {"rel_ci": 0.01}}))
    assert "**1 of 3**" in text and "nan" not in text
    assert "moved by 9.1 % (median; at most 9.1 %), against 1.0 % in the rows that met the target." in text
