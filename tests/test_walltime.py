"""Harness wall time by phase (measure/walltime.py) and the --max-prefill-tokens cap (runner.over_token_budget)."""

import json

import pytest

from cpbench.commands.manifest import record_wall_time
from cpbench.commands.runner import omp_threads, over_token_budget
from cpbench.domain.cells import CellSpec
from cpbench.measure.walltime import PHASES, PhaseTimes
from clirun import cpbench


def test_phase_times_sum_and_other():
    t = PhaseTimes()
    t.add("samples", 2.0)
    t.add("samples", 1.04)
    t.add("warmup", 0.5)
    got = t.breakdown(5.0)
    assert got == {"warmup": 0.5, "samples": 3.0, "other": 1.5}
    assert list(got) == [p for p in PHASES if p in got]  # PHASES order
    assert t.breakdown(1.0)["other"] == 0.0  # never negative


def test_phase_times_refuses_unknown_phase():
    with pytest.raises(ValueError, match="unknown harness phase 'sampling'"):
        PhaseTimes().add("sampling", 1.0)


def test_token_cap_skips_batches_not_single_requests():
    assert over_token_budget(CellSpec(4, (16384,) * 16, (0,) * 16), 131072) == (
        "skipped", "262144 extend tokens in one batch > --max-prefill-tokens 131072: raise it (0 = no cap) "
                   "to measure this cell")
    assert over_token_budget(CellSpec(4, (8192,) * 16, (0,) * 16), 131072) is None  # exactly at the cap
    assert over_token_budget(CellSpec(4, (262144,), (0,)), 131072) is None  # one request always runs
    assert over_token_budget(CellSpec(4, (16384,) * 16, (0,) * 16), 0) is None  # 0: no cap
    # prefix tokens are cached, not prefilled: only extend tokens count
    assert over_token_budget(CellSpec(4, (4096,) * 16, (60000,) * 16), 65536) is None


@pytest.mark.parametrize("value, want", [("2", 2), ("1", 1), ("0", None), ("-3", None), ("abc", None), ("", None)])
def test_omp_threads_reads_a_positive_int_only(monkeypatch, value, want):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert omp_threads() == want


def test_sweep_records_skipped_cells_and_phase_times(tmp_path):
    out = tmp_path / "run"
    r = cpbench("sweep", "--cp", "2", "--bs", "1,4", "--extend-len", "16", "--layers", "1", "--budget-ms", "5",
                 "--timing", "eager", "--max-prefill-tokens", "32", "--no-report", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    skipped = [x for x in rows if x["status"] == "skipped"]
    assert {x["bs"] for x in skipped} == {4} and len(skipped) == 4  # 2 ranks x 2 modes
    assert skipped[0]["reason"].startswith("64 extend tokens in one batch > --max-prefill-tokens 32")
    assert {x["status"] for x in rows if x["bs"] == 1} == {"ok"}
    m = json.loads((out / "manifest.json").read_text())
    phases = m["sweep_phase_s"][-1]
    assert set(phases) <= set(PHASES) and "samples" in phases and "startup" in phases
    assert sum(phases.values()) == pytest.approx(m["sweep_wall_s"][-1], abs=0.1 * len(phases))
    from cpbench.report.run_report import environment_table

    line = next(x for x in environment_table(m, cpu=True).splitlines() if "where the time went" in x)
    assert f"samples {phases['samples']:.1f}" in line and f"startup {phases['startup']:.1f}" in line
    # a resume with the cap lifted measures the skipped cell
    r = cpbench("sweep", "--cp", "2", "--bs", "1,4", "--extend-len", "16", "--layers", "1", "--budget-ms", "5",
                 "--timing", "eager", "--max-prefill-tokens", "0", "--no-report", "--resume", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {x["status"] for x in rows if x["bs"] == 4} >= {"ok"}


def test_sweep_refuses_when_every_batch_is_over_the_cap(tmp_path):
    r = cpbench("sweep", "--cp", "2", "--bs", "4", "--extend-len", "16", "--layers", "1",
                 "--max-prefill-tokens", "32", "--out", str(tmp_path / "run"))
    assert r.returncode == 2
    assert "no cell can run: 64 extend tokens in one batch > --max-prefill-tokens 32" in r.stdout + r.stderr
    assert not (tmp_path / "run").exists()
    # every cell either not CP-eligible (extend 2 < 2 * cp_size) or over the cap: refused before any directory
    r = cpbench("sweep", "--cp", "2", "--bs", "2,4", "--extend-len", "2,16", "--layers", "1",
                "--max-prefill-tokens", "20", "--out", str(tmp_path / "mixed"))
    assert r.returncode == 2 and "each is not CP-eligible or over the token cap" in r.stdout + r.stderr
    assert not (tmp_path / "mixed").exists()
    r = cpbench("sweep", "--max-prefill-tokens", "-1", "--out", str(tmp_path / "run2"))
    assert r.returncode == 2 and "--max-prefill-tokens must be >= 0" in r.stdout + r.stderr


def test_manifest_phase_times_summed_over_invocations_and_bad_entries_ignored(tmp_path):
    from cpbench.results.store import RunDir, read_manifest
    from cpbench.report.run_report import environment_table

    m = {"sweep_wall_s": [4.0, 2.0], "sweep_phase_s": [{"samples": 2.5, "other": 1.5}, {"samples": 1.0, "x": "y",
                                                        "startup": 10 ** 400, "check": float("nan")}]}
    line = next(x for x in environment_table(m, cpu=True).splitlines() if "where the time went" in x)
    assert "samples 3.5, other 1.5 (all invocations)" in line  # a string, a huge int and NaN are left out
    path = tmp_path / "manifest.json"
    path.write_text('{"sweep_phase_s": 5, "sweep_wall_s": [1.0]}')
    assert read_manifest(path)["sweep_phase_s"] == []  # not a list: reset, as sweep_wall_s is
    run = RunDir(tmp_path)
    record_wall_time(run, 2.0, phases={"samples": 1.0})
    assert read_manifest(path)["sweep_phase_s"] == [{"samples": 1.0}]


def test_deeply_nested_manifest_is_one_line_error(tmp_path):
    from cpbench.results.store import read_manifest
    from cpbench.errors import CpbenchInputError

    path = tmp_path / "manifest.json"
    path.write_text('{"sweep_phase_s": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(CpbenchInputError, match="is not a cpbench manifest"):
        read_manifest(path)


def test_resume_refuses_other_cpu_threads_or_affinity(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2", "--bs", "1", "--extend-len", "16", "--layers", "1", "--budget-ms", "5",
            "--no-report", "--out", str(out)]
    r = cpbench(*args, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((out / "manifest.json").read_text())["cpu_threads"] == 1
    r = cpbench(*args, "--resume", env={"OMP_NUM_THREADS": "2"})
    assert r.returncode == 2 and "was measured on 1 CPU thread(s), this sweep would use 2" in r.stdout + r.stderr
    r = cpbench(*args, "--resume", "--cpu-affinity", "0", env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 2 and "was measured with --cpu-affinity (none), not 0" in r.stdout + r.stderr
    r = cpbench(*args, "--resume", env={"OMP_NUM_THREADS": "1"})  # the same host options: resumes
    assert r.returncode == 0, r.stdout + r.stderr


def test_cp_share_leaves_out_batches_skipped_over_the_cap():
    import pandas as pd

    from cpbench.report.workloads import cp_share_lines

    base = dict(model="m", tp_size=1, cp_size=2, prefix_len=0, batch=0)
    view = pd.DataFrame([{**base, "bs": 1, "max_extend_len": 16, "extend_lens": "16", "status": "ok"},
                         {**base, "bs": 4, "max_extend_len": 16, "extend_lens": "16,16,16,16", "status": "skipped"},
                         {**base, "bs": 2, "max_extend_len": 2, "extend_lens": "2,2", "status": "ineligible"}])
    (line,) = cp_share_lines(view)
    assert line == ("- m · tp 1 · cp 2: 1 of 3 requests (33 %) in 1 of 2 batch(es) ran with CP; the others are in "
                    "batches SGLang runs without CP under rule pr: every extend >= 2*cp_size = 4 (1 batch(es) "
                    "over --max-prefill-tokens were not run and are not counted).")
    (line,) = cp_share_lines(view[view["status"] == "skipped"])
    assert line == ("- m · tp 1 · cp 2: no batch ran (1 batch(es) over --max-prefill-tokens were not run and are "
                    "not counted).")


def test_resume_compares_affinity_as_cores_and_refuses_non_ascii_digits(tmp_path):
    out = tmp_path / "run"
    args = ["sweep", "--cp", "2", "--bs", "1", "--extend-len", "16", "--layers", "1", "--budget-ms", "5",
            "--no-report", "--out", str(out)]
    r = cpbench(*args, "--cpu-affinity", "0", env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    r = cpbench(*args, "--resume", "--cpu-affinity", "0-0", env={"OMP_NUM_THREADS": "1"})  # the same core
    assert r.returncode == 0, r.stdout + r.stderr
    r = cpbench(*args, "--cpu-affinity", "\u00b2", env={"OMP_NUM_THREADS": "1"})  # '²'.isdigit() is True
    assert r.returncode == 2 and "expected a CPU list such as 0-7" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
