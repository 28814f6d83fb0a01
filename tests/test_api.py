"""The Python API (cpbench.api): a notebook user builds a config, runs it and reads the rows, with the same
checks and one-line errors as the CLI, and a run written by the CLI opens the same way."""

import math

import pandas as pd
import pytest

import cpbench
from clirun import cpbench as cli

def _cfg(**kw):
    return cpbench.grid("llama-3.1-8b", **{**dict(cp_sizes=(2,), bs=(1,), extend_lens=(64,), layers=2, device="cpu",
                                               dtype="fp32", budget_ms=5, timings=("eager",)), **kw})


@pytest.mark.slow
def test_sweep_from_python_returns_the_rows_with_derived_columns_and_the_report(tmp_path, rough_charts):
    run = cpbench.sweep(_cfg(), tmp_path / "run")
    assert run.exit_code == 0 and run.message == "" and run.path == tmp_path / "run"
    assert run.report_path == tmp_path / "run" / "report.md" and run.report_path.is_file()
    rows = run.rows
    assert sorted(zip(rows["rank"], rows["mode"])) == [(0, "fused"), (0, "two-call"), (1, "fused"), (1, "two-call")]
    assert set(rows["status"]) == {"ok"} and (rows["latency_us_median"] > 0).all()
    assert (rows["per_layer_us"] == rows["latency_us_median"] / 2).all()  # a derived column, computed on read
    cp = run.critical_path()
    assert len(cp) == 1 and math.isclose(cp["speedup"].iloc[0], cp["two_call_us"].iloc[0] / cp["fused_us"].iloc[0])
    assert run.manifest["config"]["backend"] == "torch" and run.manifest["config"]["cp_sizes"] == [2]
    again = cpbench.Run.open(run.path)
    assert again.rows["latency_us_median"].tolist() == rows["latency_us_median"].tolist()


def test_bad_input_from_python_is_the_cli_s_one_line_error(tmp_path):
    with pytest.raises(cpbench.CpbenchInputError, match=r"^cp_sizes values must be >= 1, got 0$"):
        _cfg(cp_sizes=(0,))  # the CLI's check and limit, naming the parameter
    with pytest.raises(cpbench.CpbenchInputError, match="no cell can run"):
        cpbench.sweep(cpbench.grid("llama-3.1-8b", cp_sizes=(4,), extend_lens=(3,), layers=2, device="cpu"),
                      tmp_path / "none")
    assert not (tmp_path / "none").exists()
    r = cli("sweep", "--cp", "0", "--layers", "2", "--out", str(tmp_path / "cli"))
    assert r.returncode == 2 and r.stderr.strip() == "error: --cp values must be >= 1, got 0"


def test_run_open_refuses_rows_cpbench_did_not_write(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(cpbench.CpbenchInputError, match="holds rows without cp_size, rank, mode, status"):
        cpbench.Run.open(tmp_path)


def test_dir_repr_and_columns_say_what_is_there(tmp_path):
    """dir(cpbench) lists the API it serves on first use; repr(Run) is one line, not the manifest; `cpbench
    columns` names every backend of the registry (flex and fa3 included)."""
    import json

    from cpbench.kernels.backends.registry import BACKEND_NAMES

    assert {"sweep", "grid", "Run", "SweepConfig", "CpbenchInputError"} <= set(dir(cpbench))
    run = cpbench.Run(tmp_path, pd.DataFrame({"status": ["ok", "ok", "mismatch"]}), manifest={"config": {"x": 1}})
    assert repr(run) == f"Run({str(tmp_path)!r}, 3 rows: 2 ok, 1 mismatch, exit_code=0)"
    cols = json.loads(cli("columns", "--json").stdout)
    backend = next(c for c in cols if c["name"] == "backend")
    assert backend["unit"].split(" | ") == list(BACKEND_NAMES) and "flex" in BACKEND_NAMES and "fa3" in BACKEND_NAMES


GRID = dict(model="llama-3.1-8b", cp_sizes=(2,), bs=(1,), extend_lens=(64,), layers=2, device="cpu")


@pytest.mark.parametrize("kw,message", [
    (dict(bs=(70000,)), "bs values must be <= 65536, got 70000"),  # the CLI's --bs limit
    (dict(bs=4), "bs must be a list or tuple of integers, e.g. bs=(1, 4), got 4"),
    (dict(bs=(1.5,)), "bs must be integers, got 1.5"),
    (dict(bs=(True,)), "bs must be integers, got True"),
    (dict(bs=()), "bs is empty: give a list such as 1,4,16"),
    (dict(cp_sizes=2), "cp_sizes must be a list or tuple of integers, e.g. cp_sizes=(2, 4), got 2"),
    (dict(cp_sizes=(2048,)), "cp_sizes values must be <= 1024, got 2048"),
    (dict(extend_lens=(1 << 25,)), "extend_lens values must be <= 16777216, got 33554432"),
    (dict(extend_lens="64"), "extend_lens must be a list or tuple of integers, e.g. extend_lens=(2048, 8192), "
                             "got '64'"),
    (dict(prefix_len="0"), "prefix_len must be an integer in [0, 16777216], got '0'"),
    (dict(prefix_len=-1), "prefix_len must be an integer in [0, 16777216], got -1"),
    (dict(layers="2"), "layers must be an integer >= 1 (or None: the model's), got '2'"),
    (dict(model=3), "model must be a preset name (cpbench models lists them) or a ModelSpec, got 3"),
    (dict(backends=5), "backends must be a backend name or a list of them, e.g. ('torch',), got 5"),
    (dict(device=3), "device must be 'cuda', 'cuda:N', 'cpu' or None (cuda if present), got 3"),
    (dict(bs=tuple(range(1, 1001)), extend_lens=tuple(range(64, 264))),
     "cp_sizes x bs x extend_lens make 200000 cells, more than 100000: sweep fewer values"),
    (dict(bs=(65536,), extend_lens=tuple(range(64, 364))),
     "cp_sizes x bs x extend_lens plan 19660800 requests over their batches, more than 16777216"),
])
def test_grid_applies_the_cli_s_limits_and_names_the_parameter(kw, message):
    """#49 N9: cpbench.grid applied none of the CLI's size limits (bs=(10**9,) built a 10**9-request batch), and
    a wrong type escaped as a TypeError or AttributeError naming no parameter."""
    with pytest.raises(cpbench.CpbenchInputError) as e:
        cpbench.grid(**{**GRID, **kw})
    assert str(e.value).startswith(message), str(e.value)


def test_grid_refuses_a_huge_batch_before_allocating_it():
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(cpbench.CpbenchInputError, match=r"^bs values must be <= 65536, got 1000000000$"):
            cpbench.grid(**{**GRID, "bs": (10**9,)})
        assert tracemalloc.get_traced_memory()[1] < 1 << 20  # peak under 1 MiB, not 8 GB of request tuples
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name,cpu", [("cpu-torch-default", True), ("h200-fa3-llama-3.1-8b", False)])
def test_critical_path_says_whether_it_carries_a_claim(name, cpu):
    """#49: Run.critical_path() of a CPU run gave speedups with nothing saying they claim nothing; its frame
    carries the report's words (a column and ``attrs``), and a GPU run's says it is a benchmark."""
    from pathlib import Path

    run = cpbench.Run.open(Path(__file__).parent.parent / "docs" / "runs" / name)
    cp = run.critical_path()
    want = "functional check, not a benchmark" if cpu else "benchmark"
    assert len(cp) > 0 and set(cp["claim"]) == {want}
    assert cp.attrs["claim"] == want and run.rows.attrs["claim"] == want
    if cpu:
        assert cp.attrs["claim_note"] == ("CPU timings move by tens of percent between runs: speedup is a ratio of "
                                          "two such timings, not a speedup, and its interval carries no verdict")
