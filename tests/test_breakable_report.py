"""The breakable study's part of a report (studies/breakable/report.py): handed down as one entry of
``studies.study_reports()``, it puts the "Prefill forward" section in the summary and the ``forward`` chart first in
the group's chart table; the report itself imports no study, so without the tuple neither appears."""

import math

from cpbench.report.charts import chart_stems
from cpbench.report.data import cells, prepare
from cpbench.report.run_report import render_report
from cpbench.studies import study_reports
from cpbench.studies.breakable.report import forward_cells
from runfactory import make_rows, manifest

GPU = {"device": "cuda:0", "gpu_name": "NVIDIA H200"}


def _rows() -> list[dict]:
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(2048,), timings=("breakable", "graph"),
                     backends=("trtllm-fmha-v2",), noise=0)
    for r in rows:
        if r["timing"] == "breakable":
            r.update(segments="graph", layer_rest="model", host_launch_us=10.0)
    return rows


def test_the_forward_section_and_chart_come_from_the_study_tuple(tmp_path):
    import pandas as pd

    df = pd.DataFrame(_rows())
    fw = forward_cells(cells(prepare(df)))
    assert len(fw) == 1
    c = fw.iloc[0]
    assert math.isclose(c["saved_us"], c["two_call_us"] - c["fused_us"])
    with_study = render_report(df, manifest(**GPU), "run", studies=study_reports())
    section = with_study.split("## Prefill forward (breakable CUDA graphs)", 1)[1].split("\n## ", 1)[0]
    cell_row = next(line for line in section.splitlines() if line.startswith("| trtllm-fmha-v2 | 4 | 1 |"))
    assert f"{c['two_call_us'] / 1e3:.2f}" in cell_row and "| graph |" in cell_row
    assert with_study.index("## Prefill forward") < with_study.index("## Environment")
    stems = [s for s, *_ in chart_stems(prepare(df), studies=study_reports())]
    assert stems[0] == "forward"
    bare = render_report(df, manifest(**GPU), "run")
    assert "## Prefill forward" not in bare and "forward" not in [s for s, *_ in chart_stems(prepare(df))]
