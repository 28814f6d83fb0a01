"""--swa-pool: the SWA pool's own page table, its duplicate in the fused call, and how bytes, copy time and the
memory chart count both tables."""

import pandas as pd
import pytest
import torch
from clirun import cpbench

from cpbench.kernels.backends.base import Stopwatch, swa_table
from cpbench.spec.geometry import rank_geometry
from cpbench.kernels.kv import build_block_tables, build_swa_block_tables, duplicate_block_tables
from cpbench.spec.models import get_preset, with_overrides
from cpbench.results.store import load_run
from cpbench.kernels.workload import build_cell, rank_work

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16", "--budget-ms", "5",
        "--no-profile"]


def test_swa_table_is_sized_like_the_full_table():
    """SGLang layers/attention/trtllm_mha_backend.py, TRTLLMHAAttnBackend.init_forward_metadata: the SWA
    table is the full table's entries translated to SWA-pool ids, so it has the full table's shape [bs, W]
    int32; its pages are the SWA pool's own (here: a separate permutation)."""
    bt, n = build_block_tables([19, 27], 4, context_len=64, seed=3)
    swa = build_swa_block_tables(bt, [19, 27], 4, seed=3)
    assert swa.shape == bt.shape == (2, 16) and swa.dtype == torch.int32
    assert (swa[0, :5] >= 0).all() and swa[0, 5:].eq(0).all() and swa[1, 7:].eq(0).all()
    assert sorted(swa[0, :5].tolist() + swa[1, :7].tolist()) == list(range(n))  # 5 + 7 pages, each once
    assert not torch.equal(swa, bt)


def test_fused_call_duplicates_the_swa_table_prev_then_next():
    """SGLang PR #33137, trtllm_mha_backend.py _build_zigzag_page_tables: zigzag_swa_page_table =
    cat(swa_page_table, swa_page_table), built once per forward; two-call reads the plain table."""
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=4, kv_heads=1, head_dim=16, page_size=4)
    cell = build_cell(model, [11, 13], [8, 14], page_size=4, dtype=torch.float32, device="cpu", swa_pool=True)
    work = rank_work(cell, rank_geometry([11, 13], [8, 14], 4, 1))
    sw = Stopwatch(torch.device("cpu"))
    (dup,) = swa_table(work, "fused", sw)
    t = cell.swa_block_tables.tolist()
    assert dup.tolist() == [t[0], t[1], t[0], t[1]] and torch.equal(dup, duplicate_block_tables(cell.swa_block_tables))
    assert "swa_page_table" in sw.us
    assert swa_table(work, "two-call", sw) == []
    plain = build_cell(model, [11, 13], [8, 14], page_size=4, dtype=torch.float32, device="cpu")
    sw2 = Stopwatch(torch.device("cpu"))
    assert plain.swa_block_tables is None and swa_table(rank_work(plain, work.geometry), "fused", sw2) == []
    assert sw2.us == {}  # no --swa-pool: no setup part at all


def test_sweep_counts_both_tables(tmp_path, text_reports):
    out = tmp_path / "r"
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "2", "--extend-len", "40", "--prefix", "8",
                "--swa-pool", "--out", str(out), *TINY)
    assert r.returncode == 0, r.stdout[-800:] + r.stderr[-800:]
    df, manifest = load_run(out)
    assert manifest["config"]["swa_pool"] is True and set(df["status"]) == {"ok"}
    one = 2 * 3 * 4  # [bs 2, ceil(48 / 16) = 3 pages] int32
    assert set(df["page_table_bytes"]) == {2 * one} and set(df["swa_page_table_bytes"]) == {one}
    fused, two = df[df["mode"] == "fused"], df[df["mode"] == "two-call"]
    assert set(fused["page_table_dup_bytes"]) == {4 * one} and set(two["page_table_dup_bytes"]) == {0}
    assert (fused["dup_copy_us"] > 0).all() and (two["dup_copy_us"] == 0).all()
    assert fused["setup_us_swa_page_table"].notna().all()


def test_swa_pool_needs_window_layers():
    r = cpbench("sweep", "--device", "cpu", "--model", "llama-3.1-8b", "--swa-pool", *TINY)
    assert r.returncode == 2 and "--swa-pool needs a model with sliding-window layers" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_memory_chart_shows_both_duplicated_tables(tmp_path, monkeypatch):
    """A GPU run's fused rows hold both setup_mem_page_table and setup_mem_swa_page_table: the chart stacks
    them as two parts and labels the fused bar with their joint share."""
    from cpbench.report import memory, style

    base = dict(status="ok", cp_size=4, bs=1, seq_len=8192, setup_mem_metadata=1000.0, setup_mem_plan=0.0,
                setup_mem_workspace=0.0, setup_mem_outputs=5000.0, setup_mem_comm=0.0, setup_mem_other=0.0,
                forward_mem_bytes=100.0, peak_mem_bytes=7000.0)
    df = pd.DataFrame([
        {**base, "mode": "two-call", "setup_mem_page_table": 0.0, "setup_mem_swa_page_table": 0.0,
         "setup_mem_bytes": 6000.0},
        {**base, "mode": "fused", "setup_mem_page_table": 1024.0, "setup_mem_swa_page_table": 1024.0,
         "setup_mem_bytes": 8048.0},
    ])
    m = memory.setup_memory_frame(df)
    assert m.loc[m["mode"] == "fused", "dup_share"].item() == pytest.approx(2048 / 8048)
    seen = {}
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: seen.setdefault("fig", fig) and [])
    memory.setup_memory_chart(df, tmp_path, "memory", "gpt-oss-120b")
    labels = [t.get_text() for leg in seen["fig"].legends for t in leg.get_texts()]
    assert "duplicated page table" in labels and "duplicated SWA page table (--swa-pool)" in labels
