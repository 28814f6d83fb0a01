"""The flex backend (kernels/backends/flex.py): two-call, fused and cp-native on one kernel family equal the
torch reference at the window edge, with sinks and a cached prefix; a sweep records cp-native on flex and
records it unsupported elsewhere."""

import pytest
import torch

from cpbench.domain.geometry import all_ranks
from cpbench.domain.models import get_preset, with_overrides
from cpbench.kernels.backends import get_backend
from cpbench.kernels.backends.base import calls_and_table
from cpbench.kernels.backends.flex import build_call, mode_rows
from cpbench.kernels.workload import build_cell, rank_work
from cpbench.studies.line.section import line_section
from cpbench.results.critical_path import critical_path
from cpbench.studies.line.view import line_view
from cpbench.results.store import load_run, read_jsonl
from cpbench.results.verdicts import effect_text
from clirun import cpbench

CPU = torch.device("cpu")


def _outputs(backend, work, mode):
    p = backend.prepare(work, mode)
    p.forward()
    return p, p.local_outputs()


@pytest.mark.parametrize("window", [15, 16, 17])  # W-1, W, W+1 around a 16-token page
@pytest.mark.slow
def test_three_modes_equal_the_reference_at_the_window_edge(window):
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=32, window=window)
    assert model.has_sinks and sorted(model.layer_kinds) == [-1, window - 1]  # a window layer, a full layer, sinks
    ext, pre = [40, 72], [0, 16]
    cell = build_cell(model, ext, pre, page_size=16, dtype=torch.float32, device=CPU, seed=window)
    flex, ref = get_backend("flex"), get_backend("torch")
    for g in all_ranks(ext, pre, 4):
        work = rank_work(cell, g)
        _, want = _outputs(ref, work, "two-call")
        for mode in ("two-call", "fused", "cp-native"):
            _, got = _outputs(flex, work, mode)
            for w in want:
                assert torch.allclose(got[w], want[w], atol=2e-6, rtol=0), (g.rank, mode, w)


def test_the_modes_differ_in_calls_rows_and_the_table_they_read():
    model = with_overrides(get_preset("gpt-oss-120b"), layers=1, heads=4, kv_heads=1, head_dim=16)
    cell = build_cell(model, [64, 64, 64], [0, 0, 0], page_size=16, dtype=torch.float32, device=CPU, seed=0)
    work = rank_work(cell, all_ranks([64, 64, 64], [0, 0, 0], 4)[1])
    shapes = {m: [(name, len(rows), [len(r) for r in rows]) for name, rows in mode_rows(work, m)]
              for m in ("two-call", "fused", "cp-native")}
    assert shapes == {"two-call": [("prev", 3, [1, 1, 1]), ("next", 3, [1, 1, 1])],
                      "fused": [("combined", 6, [1] * 6)],
                      "cp-native": [("combined", 3, [2, 2, 2])]}  # a row per request: its prev and next blocks
    flex = get_backend("flex")
    assert [flex.prepare(work, m).calls_per_layer for m in ("two-call", "fused", "cp-native")] == [2, 1, 1]


@pytest.mark.slow
def test_a_sweep_runs_cp_native_on_flex_and_records_it_unsupported_on_the_reference(tmp_path):
    out = tmp_path / "run"
    proc = cpbench("sweep", "--backend", "flex,torch", "--modes", "two-call,fused,cp-native", "--cp", "2", "--bs", "1",
                   "--extend-len", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                   "--budget-ms", "5", "--timing", "eager", "--no-report", "--no-profile", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-1500:]
    rows = {(x["backend"], x["rank"], x["mode"]): x for x in read_jsonl(out / "results.jsonl")}
    assert len(rows) == 2 * 2 * 3
    assert all(rows[("flex", rk, m)]["status"] == "ok" for rk in (0, 1) for m in ("two-call", "fused", "cp-native"))
    assert rows[("flex", 0, "cp-native")]["calls_per_layer"] == 1 and rows[("flex", 0, "two-call")]["calls_per_layer"] == 2
    native = rows[("torch", 0, "cp-native")]
    assert (native["status"], native["reason"]) == ("unsupported", "torch has no cp-native call (backends with one: fa3, flex)")
    assert rows[("torch", 0, "fused")]["status"] == "ok"  # the pair is measured as before
    df, _ = load_run(out)
    line = line_view(df)  # the line: flex only (the torch reference has no cp-native row that ran)
    assert list(line["backend"]) == ["flex"] and line["page_table_fused_bytes"].isna().all()  # CPU: not measured
    r = line.iloc[0]
    assert r["native_vs_two_call"] == pytest.approx(r["two_call_us"] / r["cp_native_us"])
    assert r["native_vs_fused"] == pytest.approx(r["fused_us"] / r["cp_native_us"])
    assert r["native_vs_fused_ci_low"] <= r["native_vs_fused"] <= r["native_vs_fused_ci_high"]
    cp = critical_path(df)  # the pair's own view is unchanged by the third mode's rows
    flex = cp[cp["backend"] == "flex"].iloc[0]
    assert flex["speedup"] == pytest.approx(r["fused_vs_two_call"]) and flex["status"] == "ok"
    text = "\n".join(line_section(df, cp, cpu=True))
    assert "## Three points on one kernel family" in text and "| flex | 2 | 1 | 64 | eager |" in text
    # the terminal shows the three points too: flex's table, and none for the reference (no cp-native row ran)
    out_text = proc.stdout
    assert "cp_size 2, flex, eager: three points" in out_text and "torch, eager: three points" not in out_text
    table = out_text.split("cp_size 2, flex, eager: three points")[1]
    cells = next(ln for ln in table.splitlines() if ln.startswith("│")).split("│")[1:-1]
    assert [c.strip() for c in cells] == ["1", "64", f"{r['two_call_us'] / 1e3:.3f}", f"{r['fused_us'] / 1e3:.3f}",
                                          f"{r['cp_native_us'] / 1e3:.3f}", effect_text(r["native_vs_fused"])]


@pytest.mark.slow
def test_cp_native_alone_or_beside_fused_runs_and_reports(tmp_path, rough_charts):
    """Mode lists without the pair: cp-native alone (no speedup of the pair: the report says so, no crash) and
    cp-native with fused (the fused rows run; the fused-vs-two-call check needs two-call and is skipped)."""
    small = ["--backend", "flex", "--cp", "2", "--bs", "1", "--extend-len", "64", "--layers", "2", "--heads", "4",
             "--kv-heads", "2", "--head-dim", "16", "--budget-ms", "5", "--no-profile"]
    alone = cpbench("sweep", *small, "--modes", "cp-native", "--out", str(tmp_path / "a"))
    assert alone.returncode == 0 and "Traceback" not in alone.stderr, alone.stderr[-1500:]
    assert (tmp_path / "a" / "report.md").is_file()
    pair = cpbench("sweep", *small, "--modes", "cp-native,fused", "--no-report", "--out", str(tmp_path / "b"))
    assert pair.returncode == 0, pair.stderr[-1500:]
    assert {(r["mode"], r["status"]) for r in read_jsonl(tmp_path / "b" / "results.jsonl")} == {("cp-native", "ok"),
                                                                                                ("fused", "ok")}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_sink_fold_rounds_once(dtype):
    """``out * sigmoid(lse - sink)`` is rounded to the output dtype once: within half a unit in the last place
    of the exact (fp64) product, element by element. Rounding the factor first (the fold before) misses that
    bound on about a third of these elements."""
    from cpbench.kernels.backends.flex import fold_sinks

    g = torch.Generator().manual_seed(0)
    o = (torch.randn(2, 8, 64, 32, generator=g) * 2).to(dtype)  # |o| up to ~8: several binades
    lse = torch.randn(2, 8, 64, generator=g) * 3
    sink = torch.randn(1, 8, 1, generator=g)
    exact = o.double() * torch.sigmoid(lse.double() - sink.double()).unsqueeze(-1)
    fi = torch.finfo(dtype)  # below the smallest normal the spacing is fixed (fp16's subnormals)
    half_ulp = fi.eps / 2 * torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(fi.smallest_normal))))

    def over(folded):  # share of elements past half an ulp; the slack is the fp32 product's and factor's own
        # error (a few 2^-24 of |x|, under 2^-12 of fp16's half ulp), which can tip a near-tie the other way
        return ((folded.double() - exact).abs() > half_ulp * (1 + 2**-10)).double().mean().item()

    factor_rounded = o * torch.sigmoid(lse - sink).unsqueeze(-1).to(dtype)
    assert over(factor_rounded) > 0.1  # the bound can fail
    folded = fold_sinks(o.clone(), lse, sink)
    assert folded.dtype == dtype and over(folded) == 0.0


def test_queries_padded_to_the_compiled_block_give_the_same_outputs():
    """A compiled call pads its queries to a multiple of 128 (the H200 kernel has no config for other query
    lengths); the padding queries see nothing and change no real output. Checked eagerly on the CPU, on a
    cell whose blocks are 5 and 9 queries long (every call padded)."""
    from cpbench.kernels.backends.flex import FlexBackend

    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=32, window=16)
    ext, pre = [40, 72], [0, 16]
    cell = build_cell(model, ext, pre, page_size=16, dtype=torch.float32, device=CPU, seed=1)
    plain, padded = FlexBackend(), FlexBackend(q_align=128)
    for g in all_ranks(ext, pre, 4):
        work = rank_work(cell, g)
        for mode in ("two-call", "fused", "cp-native"):
            _, want = _outputs(plain, work, mode)
            _, got = _outputs(padded, work, mode)
            _, table = calls_and_table(work, "two-call" if mode == "cp-native" else mode)
            for _, rows in mode_rows(work, mode):
                call = build_call(work, rows, table, 128)
                real = max(sum(s.q_len for s, _ in blocks) for blocks in rows)  # at most 9 + 9 (cp-native)
                assert call.q.shape[2] == call.q_pos.shape[1] == 128 and real <= 18
                assert (call.q_pos[:, real:] == -1).all()  # the padding queries see nothing
            for w in want:
                assert torch.allclose(got[w], want[w], atol=1e-6, rtol=0), (g.rank, mode, w)


def test_flex_is_held_to_the_dtype_tolerance_plus_the_folds_rounding():
    """The sink fold after FlexAttention rounds an already rounded output once more: flex's tolerance is the
    dtype's plus half an ulp at |out| in [4, 8); a backend whose kernel takes the sinks keeps the dtype's."""
    from cpbench.domain.tolerance import REFERENCE_TOLERANCE, reference_tolerance

    for dtype, half_ulp in (("bf16", 2.0 ** -6), ("fp16", 2.0 ** -9)):
        eps = float(torch.finfo(getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype])).eps)
        assert half_ulp == eps / 2 * 4  # half an ulp at 4
        assert reference_tolerance(dtype, "flex") == REFERENCE_TOLERANCE[dtype] + half_ulp
        for other in ("torch", "flashinfer-fa2", "flashinfer-fa3", "trtllm-fmha-v2", ""):
            assert reference_tolerance(dtype, other) == REFERENCE_TOLERANCE[dtype]
    assert reference_tolerance("fp32", "flex") == REFERENCE_TOLERANCE["fp32"]
    with pytest.raises(KeyError):
        reference_tolerance("int8", "flex")


def test_cp_native_at_cp_1_is_one_call_over_the_requests():
    """At cp_size 1 a request is one block (no next block): cp-native is one call with a row per request, and
    its outputs equal the reference."""
    model = with_overrides(get_preset("gpt-oss-120b"), layers=2, heads=8, kv_heads=2, head_dim=32, window=16)
    ext, pre = [37, 40], [0, 8]
    cell = build_cell(model, ext, pre, page_size=16, dtype=torch.float32, device=CPU, seed=2)
    work = rank_work(cell, all_ranks(ext, pre, 1)[0])
    assert [(name, [len(r) for r in rows]) for name, rows in mode_rows(work, "cp-native")] == [("combined", [1, 1])]
    _, want = _outputs(get_backend("torch"), work, "two-call")
    _, got = _outputs(get_backend("flex"), work, "cp-native")
    for w in want:
        assert torch.allclose(got[w], want[w], atol=2e-6, rtol=0), w


def test_the_reference_check_line_names_each_backends_tolerance():
    import pandas as pd

    from cpbench.report.tables import reference_check_lines

    rows = pd.DataFrame([{"dtype": "bf16", "backend": b, "status": "ok", "max_abs_err": e, "diff_vs_two_call": 0.0}
                         for b, e in (("flex", 0.0228), ("torch", 0.0085))])
    (line,) = reference_check_lines(rows)
    assert line.endswith("max |out − reference| 0.0228, fused vs two-call at most 0 (tolerance flex 0.03563, "
                         "torch 0.02)."), line
    (line,) = reference_check_lines(rows[rows["backend"] == "torch"])
    assert line.endswith("(tolerance 0.02)."), line
