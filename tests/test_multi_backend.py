"""Several backends in one sweep (`--backend a,b`): every backend measures the same cells, rows are keyed by
backend, a resume keeps the backend list, and the report's first table answers per backend.

On a CPU only the torch reference runs, so a second CPU backend is registered for these tests under another
name (the same class: its rows must equal the first backend's in everything but the name and timings)."""

import dataclasses

import pandas as pd
import pytest

from cpbench.kernels.backends import registry
from cpbench.domain.models import get_preset, with_overrides
from cpbench.results.store import read_jsonl
from cpbench.cli.sweep import run_sweep
from sweepcfg import grid_config, output
from cpbench.errors import CpbenchInputError
from cpbench.report.backend_answer import backend_answer, best_of
from clirun import cpbench

MODEL = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=16, page_size=16)
def config(backend: str):
    return grid_config(backend, bs_list=(1, 2), extend_len_list=(64,))


@pytest.fixture
def twin(monkeypatch):
    """A second CPU backend, ``torch-twin`` (the torch reference under another name)."""
    spec = dataclasses.replace(registry.BACKENDS["torch"], name="torch-twin")
    monkeypatch.setitem(registry.BACKENDS, "torch-twin", spec)
    return "torch-twin"


def test_each_backend_measures_every_cell(tmp_path, twin, text_reports):
    out = tmp_path / "run"
    assert run_sweep(config(f"torch,{twin}"), output(out, report=True)) == 0
    rows = pd.DataFrame(read_jsonl(out / "results.jsonl"))
    assert len(rows) == 2 * 2 * 2 * 2  # backends x bs x ranks x modes
    for backend, g in rows.groupby("backend"):
        assert sorted(zip(g["bs"], g["rank"], g["mode"])) == sorted(
            (bs, r, m) for bs in (1, 2) for r in (0, 1) for m in ("two-call", "fused")), backend
    assert set(rows["status"]) == {"ok"} and set(rows["backend"]) == {"torch", twin}
    a, b = (rows[rows["backend"] == n].sort_values(["bs", "rank", "mode"]).reset_index(drop=True) for n in ("torch", twin))
    assert (a["max_abs_err"] == b["max_abs_err"]).all()  # the same inputs: one cell's tensors serve both
    report = (out / "report.md").read_text()
    assert "torch-twin" in report and "torch" in report


def test_resume_with_another_backend_list_is_refused(tmp_path, twin):
    out = tmp_path / "run"
    assert run_sweep(config("torch"), output(out)) == 0
    # the manifest names one backend
    with pytest.raises(CpbenchInputError, match=f"measured with --backend torch, not --backend torch,{twin}:"):
        run_sweep(config(f"torch,{twin}"), output(out, resume=True))


def test_make_config_keeps_order_and_drops_duplicates(twin):
    cfg = config("torch,torch-twin,torch")
    assert cfg.backends == ("torch", "torch-twin") and cfg.backend == "torch,torch-twin"
    assert config("auto").backends == (registry.resolve_auto("cpu"),)
    with pytest.raises(CpbenchInputError, match="unknown backend 'fa9'"):
        config("torch,fa9")


def test_cli_refuses_a_gpu_backend_in_the_list_on_cpu(tmp_path):
    r = cpbench("sweep", "--backend", "torch,flashinfer-fa3", "--cp", "2", "--bs", "1", "--layers", "1", "--out",
                str(tmp_path / "r"), "--device", "cpu")
    assert r.returncode == 2 and "backend flashinfer-fa3 cannot run here" in r.stderr and "Traceback" not in r.stderr
    r = cpbench("sweep", "--backend", "torch,fa9", "--cp", "2", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "unknown --backend 'fa9'" in r.stderr and "or both" not in r.stderr


def test_backend_answer_names_the_fastest_backend():
    base = dict(model="m", cp_size=4, bs=1, max_extend_len=2048, prefix_len=0, extend_lens="2048", timing="graph",
                status="ok", host_bound=False, p10_two_call_us=float("nan"), p90_two_call_us=float("nan"),
                p10_fused_us=90.0, p90_fused_us=110.0)
    view = pd.DataFrame([
        {**base, "backend": "flashinfer-fa3", "two_call_us": 1000.0, "fused_us": 1250.0, "speedup": 0.8,
         "speedup_ci_low": 0.78, "speedup_ci_high": 0.82},
        {**base, "backend": "trtllm-fmha-v2", "two_call_us": 1000.0, "fused_us": 800.0, "speedup": 1.25,
         "speedup_ci_low": 0.99, "speedup_ci_high": 1.3}])
    assert best_of(view.iloc[0])[:2] == (1000.0, "two-call") and best_of(view.iloc[1])[:2] == (800.0, "fused")
    lines = backend_answer(view)
    row = next(ln for ln in "\n".join(lines).splitlines() if ln.startswith("| 4 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "slower −25.0 % [−28.2, −22.0]" and cells[5] == "1.000 two-call"  # a speedup of 0.8 [0.78, 0.82]
    assert cells[6] == "tie +20.0 % [−1.0, +23.1]"  # 1.25 [0.99, 1.3]: the interval contains 0
    assert cells[7] == "0.800 [0.090–0.110] fused" and cells[8] == "trtllm-fmha-v2 (+20.0 % vs flashinfer-fa3)"


def test_every_table_of_a_two_backend_report_shows_both_backends():
    """#33: the memory table of a two-backend report had no backend column and showed one backend's numbers.
    Two backends with different memory and latency: every per-cell table names both, with their own values."""
    import re

    from runfactory import make_rows, manifest
    from cpbench.report.run_report import render_report
    from cpbench.results.derived import derive

    rows = make_rows(cp_sizes=(4,), bss=(1, 4), seqs=(2048,), backends=("flashinfer-fa3", "trtllm-fmha-v2"),
                     latency=lambda m, b, t, cp, bs, seq, r, mode: (1000.0 if b == "flashinfer-fa3" else 700.0) * bs)
    for r in rows:
        if r["backend"] == "flashinfer-fa3":  # a different workspace: the setup bytes differ by backend
            r["setup_mem_workspace"] += 40 << 20
            r["setup_mem_bytes"] += 40 << 20
            r["peak_mem_bytes"] += 40 << 20
    text = render_report(derive(pd.DataFrame(rows), manifest()), manifest(), "two")
    heading, per_backend, tables = "", {"flashinfer-fa3": 0, "trtllm-fmha-v2": 0}, []
    for block in text.split("\n\n"):
        if block.startswith("#"):
            heading = block
            continue
        if not block.startswith("|") or "bs" not in block.splitlines()[0]:
            continue
        tables.append(block)
        head = block.splitlines()[0]
        named = [b for b in per_backend if f"· {b} ·" in heading]
        if named:  # one table per backend, named in its heading
            per_backend[named[0]] += 1
        elif "backend" in head:  # a backend column: both backends in it
            assert "flashinfer-fa3" in block and "trtllm-fmha-v2" in block, block
        else:  # the first table: a column per backend
            assert "flashinfer-fa3:" in head and "trtllm-fmha-v2:" in head, (heading, head)
    assert per_backend["flashinfer-fa3"] == per_backend["trtllm-fmha-v2"] > 0
    mem = next(t for t in tables if "two-call setup" in t.splitlines()[0])
    by = {ln.split("|")[1].strip(): ln.split("|")[5].strip() for ln in mem.splitlines()[2:]}
    assert set(by) == {"flashinfer-fa3", "trtllm-fmha-v2"} and by["flashinfer-fa3"] != by["trtllm-fmha-v2"]
