"""The line of three points on one kernel family: two-call, fused and cp-native (``--modes
two-call,fused,cp-native`` on a backend with a cp-native call: fa3's ``cache_batch_idx``, flex). Its view of a run
(:mod:`.view`), its report section (:mod:`.section`) and chart (:mod:`.chart`); :data:`REPORT` is what it adds to a
run's report, which the commands hand to the report (``studies.study_reports()``)."""

from __future__ import annotations

from functools import partial

import pandas as pd

from cpbench.domain.modes import Mode, Status
from cpbench.report.study import StudyReport
from cpbench.studies.line.chart import line_chart
from cpbench.studies.line.section import line_section

CHART = ("line", line_chart, "two-call, fused and cp-native on one kernel family",
         "The share of the two-call time (two-call = 0) the PR's fused call (squares) and the CP-native call "
         "(triangles) save on the critical path, whiskers: 95 % interval; under each cell the fused call's duplicated "
         "page-table bytes, against 0 for cp-native.")
CPU_CHART = ("line", partial(line_chart, cpu=True),
             "two-call, fused and cp-native latency on one kernel family (CPU: a functional check, not a speedup)",
             "The share of the two-call time fused and cp-native save (+) or cost (−) on the critical path per cell on "
             "a CPU, uncoloured and without interval: CPU timings move by tens of percent, so this is no speedup "
             "claim.")


def _ran_native(rows: pd.DataFrame) -> bool:
    return bool(len(rows) and "mode" in rows
                and ((rows["mode"] == Mode.CP_NATIVE) & (rows["status"] == Status.OK)).any())


def charts(rows: pd.DataFrame, cpu: bool) -> tuple:
    """The line chart for a (model, backend) group with an ok cp-native row (CPU wording with ``cpu``), else none."""
    return ((CPU_CHART if cpu else CHART),) if _ran_native(rows) else ()


def not_drawn(rows: pd.DataFrame, cpu: bool) -> list[tuple[str, str]]:
    """``line`` is left out of a group that ran cp-native without two-call (nothing to set it against)."""
    modes = set(rows["mode"]) if len(rows) and "mode" in rows else set()
    if modes and (rows["status"] == Status.OK).any() and Mode.CP_NATIVE in modes and Mode.TWO_CALL not in modes:
        return [("line", "the run measured no two-call latency to set fused and cp-native against")]
    return []


REPORT = StudyReport("line", section=line_section, charts=charts, not_drawn=not_drawn)
