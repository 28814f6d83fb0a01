"""--swa-pool: the SWA pool's own page table and caches, which the window layers read (the fused call through
the table's duplicate), and how bytes, copy time and the memory chart count both tables."""

import pandas as pd
import pytest
import torch
from clirun import cpbench

from cpbench.errors import CpbenchInputError
from cpbench.kernels.backends.base import Stopwatch, swa_table
from cpbench.kernels.backends.torch_ref import TorchBackend, gather_kv, sequence_reference
from cpbench.kernels.check import max_abs_diff, max_abs_error
from cpbench.domain.geometry import all_ranks, rank_geometry
from cpbench.kernels.kv import build_block_tables, build_swa_block_tables, duplicate_block_tables
from cpbench.domain.models import get_preset, with_overrides
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
    dup = swa_table(work, "fused", sw)
    t = cell.swa_block_tables.tolist()
    assert dup.shape == (4, cell.swa_block_tables.shape[1]) and dup.dtype == torch.int32
    assert dup.tolist() == [t[0], t[1], t[0], t[1]] and torch.equal(dup, duplicate_block_tables(cell.swa_block_tables))
    assert "swa_page_table" in sw.us
    assert swa_table(work, "two-call", sw) is cell.swa_block_tables  # two-call reads the plain [bs, W] table
    plain = build_cell(model, [11, 13], [8, 14], page_size=4, dtype=torch.float32, device="cpu")
    sw2 = Stopwatch(torch.device("cpu"))
    assert plain.swa_block_tables is None and swa_table(rank_work(plain, work.geometry), "fused", sw2) is None
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
    # 2 layers (window, full) fit the budget: one cache a pool, the window layer's in the SWA pool
    assert set(df["kv_buffers"]) == {2} and set(df["swa_kv_buffers"]) == {1}
    assert set(df["kv_cache_bytes"]) == {2 * 2 * 3 * 16 * 1 * 16 * 2}  # K+V [pages 6, 16, Hkv 1, D 16] bf16


# gpt-oss-like, tiny: 4 layers (window 7, full, window 7, full), sinks; uneven batch with prefixes
GPT_OSS = with_overrides(get_preset("gpt-oss-120b"), layers=4, heads=4, kv_heads=2, head_dim=16, window=8, page_size=4)
EXT, PRE = [37, 22], [5, 14]


def _cell(**kw):
    return build_cell(GPT_OSS, EXT, PRE, page_size=4, dtype=torch.float32, device="cpu", seed=5, swa_pool=True, **kw)


def test_swa_pool_holds_the_full_pools_token_kv_in_its_own_page_layout():
    """Each window layer reads an SWA-pool cache (its own allocation, [2, pages, ...] like the full pool's)
    whose pages, read through swa_block_tables, hold the token K/V the full pool holds through block_tables."""
    cell = _cell()
    assert len(cell.kv_buffers) == 2 and len(cell.swa_kv_buffers) == 2 and cell.kv_buffer_count == 4
    assert cell.swa_layer_buffer == [0, None, 1, None] and cell.layer_buffer == [0, 0, 1, 1]
    full_ptrs = {t.data_ptr() for pair in cell.kv_buffers for t in pair}
    for i, w in enumerate(GPT_OSS.window_left_per_layer):
        k, v = cell.layer_kv(i)
        assert cell.reads_swa_pool(i) == (w >= 0)
        if w < 0:
            assert k is cell.kv_buffers[cell.layer_buffer[i]][0] and v is cell.kv_buffers[cell.layer_buffer[i]][1]
            continue
        assert k.data_ptr() not in full_ptrs and k.shape == cell.kv_buffers[0][0].shape
        assert v.data_ptr() - k.data_ptr() == k.numel() * k.element_size()  # V: num_pages blocks after K
        fk, fv = cell.kv_buffers[cell.layer_buffer[i]]
        assert not torch.equal(k, fk)  # another page layout
        for s, n in enumerate(cell.seq_lens):
            assert torch.equal(gather_kv(k, cell.swa_block_tables[s], n, 4), gather_kv(fk, cell.block_tables[s], n, 4))
            assert torch.equal(gather_kv(v, cell.swa_block_tables[s], n, 4), gather_kv(fv, cell.block_tables[s], n, 4))


def test_the_kv_budget_is_split_between_the_pools():
    """n caches fit the budget: the SWA pool gets its layers' share (>= 1), the full pool the rest (>= 1)."""
    model = with_overrides(GPT_OSS, layers=6)  # window layers 0, 2, 4; full 1, 3, 5
    one = 2 * sum(-(-n // 4) for n in [42, 36]) * 4 * 2 * 16 * 4  # one layer's K+V, fp32
    cell = build_cell(model, EXT, PRE, page_size=4, dtype=torch.float32, device="cpu", swa_pool=True,
                      kv_budget_bytes=4 * one)
    assert cell.kv_cache_bytes == one and (len(cell.kv_buffers), len(cell.swa_kv_buffers)) == (2, 2)
    assert cell.swa_layer_buffer == [0, None, 1, None, 0, None] and cell.layer_buffer == [0, 0, 1, 1, 0, 0]
    plain = build_cell(model, EXT, PRE, page_size=4, dtype=torch.float32, device="cpu", kv_budget_bytes=4 * one)
    assert plain.kv_buffer_count == 4 and plain.layer_buffer == [0, 1, 2, 3, 0, 1] and plain.swa_kv_buffers == []
    tight = build_cell(model, EXT, PRE, page_size=4, dtype=torch.float32, device="cpu", swa_pool=True,
                       kv_budget_bytes=one)
    assert tight.kv_buffer_count == 2 and tight.swa_layer_buffer == [0, None, 0, None, 0, None]  # one cache a pool
    with pytest.raises(CpbenchInputError, match="--swa-pool needs a model with sliding-window layers"):
        build_cell(with_overrides(get_preset("llama-3.1-8b"), layers=2, heads=4, kv_heads=2, head_dim=16),
                   EXT, PRE, page_size=4, dtype=torch.float32, device="cpu", swa_pool=True)


@pytest.mark.parametrize("cp", [1, 2, 4])
@pytest.mark.parametrize("order", ["prev-next", "interleaved"])
def test_fused_equals_two_call_equals_the_non_cp_reference(cp, order):
    cell = _cell()
    truth = {w: torch.cat([sequence_reference(cell, s, GPT_OSS.last_layer(w)) for s in range(len(EXT))])
             for w in GPT_OSS.layer_kinds}
    for g in all_ranks(EXT, PRE, cp):
        work = rank_work(cell, g, order)
        two, fused = TorchBackend().prepare(work, "two-call"), TorchBackend().prepare(work, "fused")
        two.forward()
        fused.forward()
        assert max_abs_diff(fused, two) == 0.0
        for w, out in fused.local_outputs().items():
            assert (out - truth[w][work.token_index]).abs().max().item() < 2e-5, (g.rank, w)
        assert max(max_abs_error(work, p, rows_per_end=64) for p in (two, fused)) < 1e-4


@pytest.mark.parametrize("mode", ["two-call", "fused"])
def test_only_the_window_layers_read_the_swa_pool(mode):
    """Spoiling one pool's caches changes the outputs of the layer kind that reads it, and only those."""
    outputs = {}
    for spoil in (None, "full", "swa"):
        cell = _cell()
        prep = TorchBackend().prepare(rank_work(cell, rank_geometry(EXT, PRE, 2, 1)), mode)
        for pair in {"full": cell.kv_buffers, "swa": cell.swa_kv_buffers}.get(spoil, []):
            for t in pair:
                t.add_(1.0)
        prep.forward()
        outputs[spoil] = {w: o.clone() for w, o in prep.local_outputs().items()}
    base, full, swa = outputs[None], outputs["full"], outputs["swa"]
    assert torch.equal(full[7], base[7]) and not torch.equal(full[-1], base[-1])
    assert torch.equal(swa[-1], base[-1]) and not torch.equal(swa[7], base[7])


def test_window_layers_slots_come_from_the_swa_table():
    """The torch backend's window layers gather the SWA cache at swa_block_tables' slots: with the SWA
    table swapped for the full one (the same caches), they would read other pages and miss the reference."""
    cell = _cell()
    work = rank_work(cell, rank_geometry(EXT, PRE, 4, 2))
    prep = TorchBackend().prepare(work, "fused")
    prep.forward()
    assert max_abs_error(work, prep) < 1e-4
    cell.swa_block_tables = cell.block_tables  # the SWA caches, through the full pool's table
    wrong = TorchBackend().prepare(work, "fused")
    wrong.forward()
    assert max_abs_error(work, wrong) > 1e-2


def test_swa_pool_needs_window_layers():
    r = cpbench("sweep", "--device", "cpu", "--model", "llama-3.1-8b", "--swa-pool", *TINY)
    assert r.returncode == 2 and "--swa-pool needs a model with sliding-window layers" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_memory_chart_shows_both_duplicated_tables(tmp_path, monkeypatch):
    """A GPU run's fused rows hold both setup_mem_page_table and setup_mem_swa_page_table: the chart stacks
    them as two parts and labels the fused bar with their joint share."""
    from cpbench.report import memory, style

    base = dict(status="ok", cp_size=4, bs=1, max_extend_len=8192, setup_mem_metadata=1000.0, setup_mem_plan=0.0,
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


def test_memory_chart_draws_one_share_line_when_every_bs_has_the_same_share(tmp_path, monkeypatch):
    """The page table and the KV cache both grow with bs: the share panel draws one neutral line and says
    it stands for every bs (one coloured line per bs hid all but the last); a bs with another share
    (a different page size) brings the per-bs lines back."""
    from runfactory import make_rows

    from cpbench.report import style
    from cpbench.report.costs import _same_for_every_bs, memory_chart, memory_frame
    from cpbench.report.data import prepare

    d = prepare(pd.DataFrame(make_rows(cp_sizes=(4,), timings=("eager",))))
    m = memory_frame(d)
    assert _same_for_every_bs(m, ["page_table_pct", "dup_pct"]) and m["bs"].nunique() == 3
    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    memory_chart(d, tmp_path, "memory", "gpt-oss-120b")
    share = figs[0].axes[1]
    assert share.get_title() == "the same for every bs"
    assert len(share.get_lines()) == 1  # page table share only: the synthetic rows record no duplicate
    other = d.copy()
    other.loc[other["bs"] == 4, "page_table_bytes"] *= 2
    assert not _same_for_every_bs(memory_frame(other), ["page_table_pct", "dup_pct"])
    memory_chart(other, tmp_path, "memory", "gpt-oss-120b")
    assert figs[1].axes[1].get_title() == "" and len(figs[1].axes[1].get_lines()) == 3
