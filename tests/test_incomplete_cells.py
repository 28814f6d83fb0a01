"""A cell missing one (rank, mode) row (a kill between a rank's two row writes, a torn last line) is
incomplete: no critical path or speedup from the ranks present, the report says so instead of "every
cell ran", and ``--resume`` completes it."""

import json
import math

import pandas as pd
import pytest

from cpbench.results.critical_path import critical_path, missing_rows
from cpbench.results.store import RunDir
from cpbench.report.data import prepare
from cpbench.report.run_report import ALL_RAN, write_report
from clirun import cpbench
from runfactory import make_rows, write_run

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16"]


def _rows(launch="simulated"):
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",), noise=0)
    for r in rows:
        r["launch"] = launch
    return rows


@pytest.mark.parametrize("launch", ["simulated", "torchrun"])
def test_a_cell_without_one_rank_mode_row_has_no_critical_path(launch):
    rows = _rows(launch)
    assert len(rows) == 4 and math.isfinite(critical_path(prepare(pd.DataFrame(rows))).iloc[0]["speedup"])
    torn = [r for r in rows if not (r["rank"] == 1 and r["mode"] == "fused")]
    c = critical_path(prepare(pd.DataFrame(torn))).iloc[0]
    assert c["status"] == "incomplete" and "no row for rank 1 fused" in c["reason"] and "--resume" in c["reason"]
    assert math.isnan(c["speedup"]) and math.isnan(c["fused_us"]) and math.isnan(c["two_call_us"])
    assert math.isnan(c["speedup_ci_low"])


def test_a_torchrun_cell_lacking_a_whole_rank_is_incomplete():
    only0 = [r for r in _rows("torchrun") if r["rank"] == 0]
    assert missing_rows(pd.DataFrame(only0), {"two-call", "fused"}) == [(1, "two-call"), (1, "fused")]
    # simulated: rank 0 alone in both modes is a --ranks 0 cell, not a torn one
    sim0 = [r for r in _rows() if r["rank"] == 0]
    assert missing_rows(pd.DataFrame(sim0), {"two-call", "fused"}) == []


def test_report_says_the_cell_is_incomplete(tmp_path):
    torn = [r for r in _rows() if not (r["rank"] == 1 and r["mode"] == "fused")]
    text = write_report(write_run(tmp_path / "run", torn), charts=False).read_text(encoding="utf-8")
    assert ALL_RAN not in text
    assert "**incomplete**, no row for rank 1 fused: rerun the sweep with --resume to complete the cell" in text
    assert "fused is faster" not in text and "fused is not faster" not in text


def test_resume_completes_a_torn_run(tmp_path, text_reports):
    out = tmp_path / "r"
    args = ["sweep", "--device", "cpu", "--cp", "2", "--bs", "1", "--seq", "32", *TINY, "--budget-ms", "5", "--timing", "eager",
            "--no-profile", "--out", out]
    assert cpbench(*args).returncode == 0
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4
    (out / "results.jsonl").write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")  # `head -n 3`
    for name in ("results.parquet", "results.csv"):  # a sweep killed before its tables were written
        (out / name).unlink()
    r = cpbench("report", out)
    assert r.returncode == 0, r.stderr
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "**incomplete**" in text and ALL_RAN not in text
    again = cpbench(*args, "--resume")
    assert again.returncode == 0, again.stderr
    rows = RunDir(out).latest_rows()
    assert sorted((x["rank"], x["mode"]) for x in rows) == [(0, "fused"), (0, "two-call"), (1, "fused"),
                                                           (1, "two-call")]
    assert cpbench("report", out).returncode == 0
    assert "**incomplete**" not in (out / "report.md").read_text(encoding="utf-8")
    assert json.loads(lines[0])["status"] == "ok"


def test_a_manifest_with_cp_sizes_not_a_list_is_said_so(tmp_path):
    rows = _rows()
    cfg = {"cp_sizes": "two", "bs_list": [1], "extend_len_list": [1024], "timings": ["eager"]}
    text = write_report(write_run(tmp_path / "run", rows, manifest_over={"config": cfg}),
                        charts=False).read_text(encoding="utf-8")
    assert "manifest.json's config holds cp_sizes 'two', not a list this cpbench reads" in text
    assert "cp t" not in text and "not measured" not in text
    good = write_report(write_run(tmp_path / "ok", rows, manifest_over={"config": {**cfg, "cp_sizes": [2, 4]}}),
                        charts=False)
    assert "cp 4 · bs 1 · 1K tokens · eager: **not measured**" in good.read_text(encoding="utf-8")


def test_resumes_mixing_a_grid_and_extend_lens_list_only_planned_cells(tmp_path, text_reports, monkeypatch):
    """A run grown by resumes with other cells, as a cpbench from before #49 let them (a resume now refuses
    another grid): the report lists only the cells some invocation planned."""
    import cpbench.commands.resume as resume

    fixed = tuple(k for k in resume.FIXED_ON_RESUME if k not in resume.GRID_OPTIONS)
    monkeypatch.setattr(resume, "FIXED_ON_RESUME", fixed)  # an older cpbench's checks: no grid among them
    monkeypatch.setattr(resume, "_planned_mismatch", lambda run, cfg: None)
    out = tmp_path / "run"
    base = ["sweep", "--device", "cpu", "--backend", "torch", *TINY, "--budget-ms", "2", "--timing", "eager", "--no-profile", "--cp", "2",
            "--out", out, "--no-report"]
    for extra in (["--bs", "1", "--seq", "32"], ["--extend-lens", "40,48", "--resume"],
                  ["--bs", "2", "--seq", "64", "--resume"]):
        r = cpbench(*base, *extra)
        assert r.returncode == 0, (extra, r.stderr[-500:])
    plans = json.loads((out / "manifest.json").read_text())["planned"]
    assert [(p["bs_list"], p["extend_len_list"], p["extend_lens"]) for p in plans] == [
        ([1], [32], None), ([1, 4, 16], [32, 64], [40, 48]), ([2], [64], None)]  # --extend-lens: default --bs
    assert cpbench("report", out).returncode == 0
    assert "not measured**" not in (out / "report.md").read_text(encoding="utf-8")  # bs 1 x 64 etc. never planned
    rows = [line for line in (out / "results.jsonl").read_text().splitlines() if json.loads(line)["max_extend_len"] != 64]
    (out / "results.jsonl").write_text("\n".join(rows) + "\n")  # the last resume stopped before its cell
    for name in ("results.parquet", "results.csv"):
        (out / name).unlink()
    assert cpbench("report", out).returncode == 0
    text = (out / "report.md").read_text(encoding="utf-8")
    missing = ["- cp 2 · bs 2 · 64 tokens · eager: **not measured** (the sweep stopped before this cell; rerun its "
               "command with `--resume`)"]
    assert [line for line in text.splitlines() if "not measured**" in line] == missing
    man = json.loads((out / "manifest.json").read_text())  # the report diffed the planned keys, in plan order
    assert [(c["bs"], c["max_extend_len"]) for c in man["planned_cells"]] == [(1, 32), (2, 48), (2, 64)]
    del man["planned_cells"]  # a manifest from before the keys were recorded: re-planned from the options
    (out / "manifest.json").write_text(json.dumps(man))
    assert cpbench("report", out).returncode == 0
    text = (out / "report.md").read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if "not measured**" in line] == missing


def test_a_huge_or_long_plan_in_an_edited_manifest_is_capped():
    """A hand-edited plan of 399^3 cells used to run for minutes; 3,000 missing cells gave 3,000 bullets."""
    from runfactory import make_rows

    from cpbench.report.run_report import MAX_NOTES, MAX_PLANNED, missing_cells

    df = pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(32,), timings=("eager",)))
    huge = {"config": {"cp_sizes": [2]}, "planned": [{"cp_sizes": list(range(1, 400)), "bs_list": list(range(1, 400)),
                                                       "extend_len_list": list(range(1, 400)), "timings": ["eager"]}]}
    assert missing_cells(df, huge) == [f"- manifest.json plans more than {MAX_PLANNED:,} cells, more than a sweep "
                                       "runs (an edited file?): the cells a stopped sweep left out are not listed."]
    long = {"config": {"cp_sizes": [2]}, "planned": [{"cp_sizes": [2], "bs_list": list(range(1, 11)),
                                                       "extend_len_list": list(range(33, 333)), "timings": ["eager"]}]}
    out = missing_cells(df, long)
    assert len(out) == MAX_NOTES + 1 and out[-1] == f"- … and {3000 - MAX_NOTES} more not measured."


JUNK_CELLS = [{"cp_size": 0, "bs": 1, "max_extend_len": 1024, "batch": 0, "timing": "eager"},
              {"cp_size": 2, "bs": "1", "max_extend_len": 1024, "batch": 0, "timing": "eager"},
              {"cp_size": 2, "bs": 1, "max_extend_len": 1024, "batch": 0, "timing": "eager", "color": "red"},
              "cp 4", {"cp_size": 2, "bs": 1, "max_extend_len": 4096, "batch": 0, "timing": "eager"}]


def test_junk_planned_cells_in_an_edited_manifest_are_left_out_by_name(tmp_path, text_reports):
    """Attack: junk entries in a hand-edited planned_cells (wrong types, unknown keys, cp_size 0) were kept and
    listed as "not measured". They are left out, each named in one warning; a real planned cell still shows."""
    out = write_run(tmp_path / "run", _rows(), manifest_over={"planned_cells": JUNK_CELLS})
    r = cpbench("report", out)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == (
        f"warning: {out / 'manifest.json'}: left out 4 of 5 planned_cells entries, not cell keys (a hand-edited "
        'file?): entry 1 {"batch": 0, "bs": 1, "cp_size": 0, "max_extend_len": 1024, "timing": "eager"} (cp_size 0 '
        'is not an integer >= 1); entry 2 {"batch": 0, "bs": "1", "cp_size": 2, "max_extend_len": 1024, "timing": '
        '"eager"} (bs "1" is not an integer >= 1); entry 3 {"batch": 0, "bs": 1, "color": "red", "cp_size": 2, '
        '"max_extend_len": 1024, "... (unknown key \'color\'); entry 4 "cp 4" (not an object)')
    text = (out / "report.md").read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if "not measured**" in line] == [
        "- cp 2 · bs 1 · 4K tokens · eager: **not measured** (the sweep stopped before this cell; rerun its command "
        "with `--resume`)"]


def test_a_resume_drops_junk_planned_cells_from_the_manifest(tmp_path):
    from cpbench.errors import CpbenchWarning
    from cpbench.commands.manifest import SweepManifest

    run = RunDir(write_run(tmp_path / "run", _rows(), manifest_over={"planned_cells": JUNK_CELLS}))
    cell = {"cp_size": 2, "bs": 4, "max_extend_len": 1024, "batch": 0, "timing": "eager"}
    with pytest.warns(CpbenchWarning, match="left out 4 of 5 planned_cells entries"):
        SweepManifest({"command": "cpbench sweep --resume"}, {}, [cell]).write(run)
    assert json.loads(run.manifest_path.read_text())["planned_cells"] == [JUNK_CELLS[-1], cell]


def test_planned_cells_that_is_not_a_list_is_ignored_with_a_warning(tmp_path):
    from cpbench.errors import CpbenchWarning
    from cpbench.results.store import read_manifest

    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"planned_cells": "cp 2", "config": {}}))
    with pytest.warns(CpbenchWarning, match="planned_cells is str, not a list of cell keys"):
        assert "planned_cells" not in read_manifest(path)
