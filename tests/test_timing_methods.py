"""A resumed sweep records each invocation's timing method (``timing_methods``, one entry per invocation like
``sweep_wall_s``) and the report shows every distinct one; a manifest written before then still reads."""

import json

from cpbench.commands.manifest import SweepManifest, record_wall_time
from cpbench.cli.sweep import run_sweep
from cpbench.report.run_report import environment_table, timing_methods
from cpbench.results.store import RunDir
from sweepcfg import grid_config, output


def _rows(table: str, label: str) -> list[str]:
    return [x for x in table.splitlines() if x.startswith(f"| {label}")]


def test_a_resume_with_another_budget_records_both_methods(tmp_path):
    out = tmp_path / "run"
    assert run_sweep(grid_config(), output(out)) == 0
    assert run_sweep(grid_config(budget_ms=40), output(out, resume=True)) == 0  # nothing left to measure
    man = RunDir(out).read_manifest()
    first, second = man["timing_methods"]
    assert "up to ~5 ms of samples per variant" in first and "up to ~40 ms of samples per variant" in second
    assert man["timing_method"] == first and len(man["sweep_wall_s"]) == 2
    rows = _rows(environment_table(man, cpu=True), "timing method")
    assert [r.split(" | ")[0] for r in rows] == ["| timing method (invocation 1)", "| timing method (invocation 2)"]
    assert "~5 ms" in rows[0] and "~40 ms" in rows[1]
    assert _rows(environment_table(man, cpu=True), "timing_methods") == []  # not repeated among the other keys


def test_equal_methods_show_as_one_row(tmp_path):
    run = RunDir(tmp_path)
    for cmd in ("cpbench sweep", "cpbench sweep --resume", "cpbench sweep --resume"):
        SweepManifest({"command": cmd, "timing_method": "CUDA events, ABBA"}, {}, []).write(run)
        record_wall_time(run, 1.0, new_entry=True)
    man = run.read_manifest()
    assert man["timing_methods"] == ["CUDA events, ABBA"] * 3
    assert _rows(environment_table(man), "timing method") == ["| timing method | CUDA events, ABBA |"]


def test_a_manifest_from_before_timing_methods_reads_and_resumes(tmp_path):
    old = {"timing_method": "A", "sweep_wall_s": [10.0, 5.0], "resumed_by": ["cpbench sweep --resume"]}
    assert _rows(environment_table(old), "timing method") == ["| timing method | A |"]  # as before
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    run = RunDir(tmp_path)
    SweepManifest({"command": "cpbench sweep --resume --budget-ms 50", "timing_method": "B"}, {}, []).write(run)
    man = run.read_manifest()
    assert man["timing_methods"] == ["A", None, "B"]  # the second invocation's method was never recorded
    assert timing_methods(man) == [("A", [1]), ("B", [3])]
    assert _rows(environment_table(man), "timing method") == ["| timing method (invocation 1) | A |",
                                                              "| timing method (invocation 3) | B |"]
    hand = {"timing_method": "A", "timing_methods": "A then B"}  # hand-edited: not a list
    (tmp_path / "manifest.json").write_text(json.dumps(hand))
    assert run.read_manifest()["timing_methods"] == []
    assert timing_methods(run.read_manifest()) == [("A", [1])]


def test_methods_shared_by_several_invocations_name_them_all():
    man = {"timing_methods": ["A", "A", "B", "A"]}
    assert timing_methods(man) == [("A", [1, 2, 4]), ("B", [3])]
    assert _rows(environment_table(man), "timing method") == ["| timing method (invocations 1, 2, 4) | A |",
                                                              "| timing method (invocation 3) | B |"]
