"""Report sections for workloads (report.workloads): when to fuse, share of requests run with CP, by layer kind."""

import pandas as pd

from cpbench.report.data import cells, prepare
from cpbench.report.workloads import _length_bins, cp_share_lines, layer_kind_table, when_to_fuse
from runfactory import make_rows


def _latency(model, backend, timing, cp, bs, seq, rank, mode):
    """fused 2x faster at 1K, 1.5x slower at bs 4 x 8K, equal at bs 1 x 8K (a tie: both modes' samples equal)."""
    base = 1000.0 + 10 * rank
    if mode == "fused" and seq == 1024:
        return base / 2
    if mode == "fused" and bs == 4 and seq == 8192:
        return base * 1.5
    return base


def _view(**kw):
    rows = make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024, 8192), timings=("eager",), noise=0.0, n_samples=20,
                     latency=_latency, **kw)
    return rows, cells(prepare(pd.DataFrame(rows)))


def test_when_to_fuse_grid():
    _, view = _view()
    ((heading, table),) = when_to_fuse(view)
    assert heading == "gpt-oss-120b · flashinfer-fa3 · eager · tp 1 · cp 2"
    assert table.splitlines() == [
        "| bs | 1K | 8K |", "| ---: | ---: | ---: |",
        "| 1 | faster +50.0 % [+50.0, +50.0] | tie +0.0 % [+0.0, +0.0] |",  # noise-free samples: zero-width intervals
        "| 4 | faster +50.0 % [+50.0, +50.0] | slower −50.0 % [−50.0, −50.0] |"]  # speedups 2 and 2/3


def test_when_to_fuse_by_tp_and_an_ineligible_cell():
    rows, _ = _view(status=lambda m, b, t, cp, bs, seq, r, mode: ("ineligible", "request 0 has 3 extend tokens")
                    if bs == 4 and seq == 1024 else None)
    tp8 = [{**r, "tp_size": 8} for r in rows]
    view = cells(prepare(pd.DataFrame(rows + tp8)))
    tables = dict(when_to_fuse(view))
    assert list(tables) == ["gpt-oss-120b · flashinfer-fa3 · eager · tp 1 · cp 2",
                            "gpt-oss-120b · flashinfer-fa3 · eager · tp 8 · cp 2"]
    assert "| 4 | no CP | slower −50.0 % [−50.0, −50.0] |" in tables["gpt-oss-120b · flashinfer-fa3 · eager · tp 8 · cp 2"]
    # 1 + 1 + 4 requests ran with CP, the 4 of the ineligible batch did not
    assert cp_share_lines(view)[0].startswith("- gpt-oss-120b · tp 1 · cp 2: 6 of 10 requests (60 %) in 3 of 4 "
                                              "batch(es) ran with CP; the others are in batches SGLang runs without "
                                              "CP under rule pr: every extend >= 2*cp_size = 4")


def test_mixed_entries_and_length_bins():
    assert _length_bins([1000, 2048, 2049, 3000, 5000, 9000, 16384]) == {
        1000: "≤ 1K", 2048: "≤ 2K", 2049: "≤ 4K", 3000: "≤ 4K", 5000: "≤ 8K", 9000: "≤ 16K", 16384: "≤ 16K"}
    assert _length_bins([1024, 8192]) == {1024: "1K", 8192: "8K"}
    view = pd.DataFrame({"model": "m", "backend": "flashinfer-fa3", "timing": "eager", "tp_size": 4, "cp_size": 4, "bs": 4,
                         "max_extend_len": [1000, 1100, 1200, 3000, 5000, 9000, 17000], "status": "ok",
                         "speedup": [1.2, 1.3, 0.99, 1.0, 1.0, 1.0, 1.0],
                         "speedup_ci_low": [1.1, 1.2, 0.98, 0.9, 0.9, 0.9, 0.9],
                         "speedup_ci_high": [1.3, 1.4, 1.01, 1.1, 1.1, 1.1, 1.1]})
    ((_, table),) = when_to_fuse(view)
    assert table.splitlines()[0] == "| bs | ≤ 1K | ≤ 2K | ≤ 4K | ≤ 8K | ≤ 16K | ≤ 32K |"
    tie = "tie +0.0 % [−11.1, +9.1]"  # a speedup of 1.0 [0.9, 1.1]
    assert table.splitlines()[2] == (f"| 4 | faster +16.7 % [+9.1, +23.1] | 1 faster · 1 tie | {tie} | {tie} | {tie} "
                                     f"| {tie} |")


def test_layer_kind_table():
    rows, _ = _view()
    for r in rows:  # window layers: fused 1.5x faster; full layers: equal
        if r["status"] == "ok":
            r["window_layers_us"] = 300.0 if r["mode"] == "fused" else 450.0 + r["rank"]
            r["full_layers_us"] = 500.0
    table = layer_kind_table(prepare(pd.DataFrame(rows)))
    assert "| gpt-oss-120b | flashinfer-fa3 | 1 | 2 | 1 | 1K | 0.451 | 0.300 | +33.5 % | 0.500 | 0.500 | +0.0 % |" in table
    assert len(table.splitlines()) == 2 + 4  # one row per cell
    assert layer_kind_table(prepare(pd.DataFrame(_view()[0]))) == ""  # no per-kind times: no table
