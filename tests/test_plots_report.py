"""Charts and report.md from synthetic run directories (no GPU, no torch in the code under test)."""

import json
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cpbench.results.critical_path import critical_path
from cpbench.results.store import load_run
from cpbench.results.verdicts import effect_text
from cpbench.report import latency, style
from cpbench.report.charts import CHARTS, not_drawn, render_frame
from cpbench.report.data import cells, prepare
from cpbench.report.run_report import write_report
from clirun import cpbench
from runfactory import default_latency, make_rows, make_run, write_run

STEMS = [name for name, *_ in CHARTS]


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def exact_latency(model, backend, timing, cp, bs, seq, rank, mode):
    """two-call slowest on rank cp-1 (1000 + 100 r), fused slowest on rank 0 (500 + 50 (cp-1-r))."""
    return 1000.0 + 100 * rank if mode == "two-call" else 500.0 + 50 * (cp - 1 - rank)


def test_two_models_get_suffixed_chart_sets(tmp_path, undrawn_charts):
    paths = render_frame(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",),
                                                backends=("flashinfer-fa2", "flashinfer-fa3"))), tmp_path)
    names = {p.name for p in paths}
    assert {"latency_gpt-oss-120b_flashinfer-fa2.png", "latency_gpt-oss-120b_flashinfer-fa3.png",
            "kernels_gpt-oss-120b_flashinfer-fa3.svg"} <= names
    assert len(paths) == 2 * 2 * len(STEMS)


def test_segments_chart_needs_a_batch_size_axis_and_spans_backends(tmp_path):
    from cpbench.report.charts import RUN_CHARTS, chart_stems
    from cpbench.report.segments import segment_axes, segments_chart

    rows = make_rows(cp_sizes=(4,), bss=(1, 4, 16, 64), seqs=(256,), timings=("graph",),
                     backends=("flashinfer-fa3", "trtllm-fmha-v2"))
    d = prepare(pd.DataFrame(rows))
    axis = segment_axes(cells(d))
    assert sorted(set(axis["segments"])) == [2, 8, 32, 128]
    assert set(axis["backend"]) == {"flashinfer-fa3", "trtllm-fmha-v2"}
    assert [s for s, *_ in chart_stems(d)].count("segments") == 1  # one chart for the whole run
    assert [name for name, *_ in RUN_CHARTS] == ["segments"] and RUN_CHARTS[0][1] is segments_chart
    paths = segments_chart(d, tmp_path, "segments", RUN_CHARTS[0][2])  # drawn once, both backends in it
    assert [p.name for p in paths] == ["segments.png", "segments.svg"] and all(p.stat().st_size > 10_000 for p in paths)
    two = prepare(pd.DataFrame(make_rows(cp_sizes=(4,), bss=(1, 4), seqs=(256,), timings=("graph",))))
    assert segment_axes(cells(two)).empty and "segments" not in [s for s, *_ in chart_stems(two)]
    assert "segments" not in [s for s, *_ in chart_stems(d, cpu=True)]  # no speedup chart from CPU timings


def test_a_host_bound_ratio_off_the_others_range_is_drawn_at_the_edge_with_its_value():
    from cpbench.report.segments import _host_bound_marks

    fig, axes = style.new_figure()
    ax = axes[0, 0]
    _host_bound_marks(ax, [(2.0, 47.4, "k", 1.9), (8.0, 9.1, "k", 1.1)], span=[-40.0, -30.0, 16.7, 18.0])
    lo, hi = ax.get_ylim()
    assert -50 < lo < -40 and 18 < hi < 25  # the kernel's points (and 0) set the scale, not +47.4 %
    assert [t.get_text() for t in ax.texts] == ["+47.4 %"]  # the off-scale one, at the edge with its effect
    assert [tuple(line.get_xydata()[0]) for line in ax.lines] == [(2.0, hi), (8.0, 9.1)]


def _nan_latencies():
    rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024, 2048), timings=("eager",))
    for r in rows:
        r.update(latency_us_median=float("nan"), latency_us_p10=None, latency_us_p90=None)
    return rows


def _zeros():
    rows = make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024, 8192))
    for i, r in enumerate(rows):
        if i % 3 == 0:
            r.update(latency_us_median=0.0, latency_us_p10=0.0, dup_copy_us=0.0, setup_us_total=0.0)
        if i % 5 == 0:
            r.update(attn_kernels=None, host_launch_us=0.0)
    return rows


def _all_failed():
    return make_rows(cp_sizes=(4,), bss=(1, 4), seqs=(7, 4096), status=lambda *a: (
        ("ineligible", "extend 7 < 2*cp_size 8") if a[5] == 7 else ("unsupported", "trtllm-gen needs SM 10.x")))


EDGE = {
    "empty": lambda: [],
    "single_cell": lambda: make_rows(cp_sizes=(4,), bss=(1,), seqs=(4096,), timings=("eager",)),
    "single_rank_row": lambda: make_rows(cp_sizes=(2,), bss=(1,), seqs=(64,), timings=("graph",))[:1],
    "nan_latencies": _nan_latencies,
    "zeros": _zeros,
    "all_failed": _all_failed,
    "sparse_columns": lambda: [{"model": "m", "backend": "b", "timing": "eager", "cp_size": 2, "bs": 1,
                                "max_extend_len": 64, "rank": 0, "mode": "fused", "status": "ok",
                                "latency_us_median": 5.0}],
}


def _drawn(monkeypatch, rows) -> dict:
    """Every chart of ``rows``, drawn by Agg but not written: ``{stem: (texts, plotted points)}`` where
    ``texts`` are the axes' text artists and ``plotted points`` the data of every line and scatter."""
    from matplotlib.collections import PathCollection

    from cpbench.report import style

    figs = {}

    def save(fig, out_dir, name):
        style.fit_suptitle(fig)
        fig.canvas.draw()  # every artist rendered: a drawing error fails here
        figs[name] = fig
        return [Path(out_dir) / f"{name}.png"]

    monkeypatch.setattr(style, "save", save)
    render_frame(pd.DataFrame(rows), Path("unused"))
    out = {}
    for name, fig in figs.items():
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        points = [y for ax in fig.axes for ln in ax.lines for y in np.atleast_1d(ln.get_ydata())]
        points += [y for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)  # scatters
                   for y in np.asarray(c.get_offsets())[:, 1:].ravel()]
        out[name] = (texts, points)
    return out


@pytest.mark.parametrize("case", sorted(EDGE))
@pytest.mark.slow
def test_charts_survive_edge_cases_and_say_why_nothing_is_drawn(monkeypatch, case):
    drawn = _drawn(monkeypatch, EDGE[case]())
    left_out = dict(not_drawn(prepare(pd.DataFrame(EDGE[case]()))))  # nothing of the rows to draw: the report says why
    assert sorted(drawn) == sorted(s for s in STEMS if s not in left_out)  # every other chart, whatever the rows
    assert set(left_out) == ({"kernels"} if case == "zeros" else {"kernels", "speedup"}
                             if case in ("single_rank_row", "sparse_columns") else set())
    if case in ("empty", "all_failed", "zeros", "nan_latencies"):  # no latency to draw: said, never a line at 0
        texts, points = drawn["latency"]
        assert points == [] and texts and all(t.endswith(("no rows in this run", "no successful cells"))
                                              for t in texts), texts
    if case == "empty":
        for name, (texts, points) in drawn.items():
            assert points == [] and len(texts) == 1 and texts[0] in (
                "no rows in this run", "no cell ran on all its ranks", "device memory not measured"), (name, texts)
    if case == "all_failed":  # the heatmap names each cell's status instead of a ratio
        assert set(drawn["speedup"][0]) == {"ineligible", "unsupported"}
    if case in ("zeros", "nan_latencies"):  # a zero or NaN latency is a failed row: named, not drawn as 0
        assert set(drawn["speedup"][0]) == {"error"}
        assert not any(y == 0 for y in drawn["throughput"][1] + drawn["overhead"][1])
    if case == "single_cell":  # the one speedup is the critical path's, printed in its cell
        speedup = critical_path(prepare(pd.DataFrame(EDGE[case]())))["speedup"].iloc[0]
        assert drawn["speedup"][0] == [effect_text(speedup)]
        finite = [y for y in drawn["latency"][1] if np.isfinite(y)]
        assert len(finite) >= 2 and all(y > 0 for y in finite)  # two-call and fused, in ms
    if case == "single_rank_row":  # one two-call row: no effect to draw, and no critical path
        assert left_out["speedup"] == "the run measured two-call only: no fused-vs-two-call effect to draw"
        assert drawn["throughput"][0] == ["no cell ran on all its ranks"]


def test_failures_never_drawn_as_zero():
    d = prepare(pd.DataFrame(_zeros()))
    assert len(d[d["latency_us_median"] == 0]) and (d.loc[d["latency_us_median"] == 0, "status"] == "error").all()
    view = cells(prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024, 8192, 65536),
                                                timings=("eager",)))))
    view.loc[0, "two_call_us"] = 0.0  # the panel must drop what reaches it anyway
    view.loc[1, "fused_us"] = np.nan
    view.loc[2, "p10_fused_us"] = 0.0
    fig, axes = style.new_figure()
    assert latency._panel(axes[0, 0], view, {lab: "k" for lab in view["label"]})
    ys = np.concatenate([c.lines[0].get_ydata() for c in axes[0, 0].containers])  # data lines, not caps
    assert len(ys) == 2 * len(view) - 2 and (ys > 0).all() and np.isfinite(ys).all()


def test_heatmap_marks_failed_cells():
    rows = make_rows(cp_sizes=(4,), bss=(1, 16), seqs=(1024, 65536), timings=("eager",), noise=0,
                     status=lambda *a: ("oom", "CUDA out of memory") if a[4] == 16 and a[5] == 65536 else None)
    view = cells(prepare(pd.DataFrame(rows)))
    fig, axes = style.new_figure()
    latency._heat(axes[0, 0], view, latency._norm(view["speedup"].to_numpy(float)))
    texts = [t.get_text() for t in axes[0, 0].texts]
    expected = view[view["status"] == "ok"]["speedup"].map(lambda s: effect_text(s))
    assert sorted(texts) == sorted(list(expected) + ["oom"])


@pytest.fixture
def report_run(tmp_path):
    def status(model, backend, timing, cp, bs, seq, rank, mode):
        return ("ineligible", "extend 7 < 2*cp_size 8") if seq == 7 else None
    return make_run(tmp_path / "run", cp_sizes=(4,), bss=(1,), seqs=(7, 8192), timings=("eager",),
                    latency=exact_latency, status=status, noise=0)


@pytest.mark.slow
def test_report_holds_run_values(report_run, rough_charts):
    path = write_report(report_run)
    md = path.read_text()
    assert path == report_run / "report.md"
    # critical path: two-call rank 3 = 1300 µs, fused rank 0 = 650 µs -> 2.00x
    assert "| 1 | 8K | 1.300 | 0.650 | +50.0 % [+50.0, +50.0] | 3 / 0 |" in md  # constant samples: a point interval
    assert ("fused is faster in 1 of 1 cell (fused saves a median +50.0 % of the two-call time, best +50.0 % at cp 4, "
            "bs 1, 8K tokens)") in md
    assert "| gpt-oss-120b | flashinfer-fa3 | 4 | 72 | 36 | 288 | 144 | 2.00× |" in md
    assert "72 → 36 per rank, 288 → 144 over 4 ranks" in md
    assert "| GPU | NVIDIA H200 |" in md and "| flashinfer | 0.7.2.post1 |" in md
    assert "```sh\ncpbench sweep --cp 2,4 --bs 1,4,16" in md
    assert "**ineligible** (two-call, fused; ranks 0–3): extend 7 < 2*cp_size 8" in md
    for stem in STEMS:
        assert f"![{stem}](plots/{stem}.png)" in md and (report_run / "plots" / f"{stem}.png").exists()
    drawn = {p: p.stat().st_mtime_ns for p in (report_run / "plots").iterdir()}
    assert write_report(report_run, charts=False).read_text() == md  # text only: the same report, charts embedded
    assert {p: p.stat().st_mtime_ns for p in (report_run / "plots").iterdir()} == drawn  # none redrawn


def test_report_summary_reports_losses(tmp_path):
    slow_fused = lambda *a: default_latency(*a) * (1.25 if a[-1] == "fused" else 1.0)
    run = make_run(tmp_path / "run", cp_sizes=(2,), bss=(1,), seqs=(65536,), timings=("graph",),
                   latency=slow_fused, noise=0)
    md = write_report(run, charts=False).read_text()
    assert "fused is not faster in the one cell" in md and "slower in 1 (worst −29.8 % at" in md
    assert "1 cells" not in md and "0 tie(s)" not in md and "0 ties (95 % interval" in md


def test_report_without_manifest_or_command(tmp_path):
    run = write_run(tmp_path / "run", make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",)),
                    with_manifest=False)
    md = write_report(run, charts=False).read_text()
    assert "| GPU | — |" in md and "not recorded in manifest.json" in md
    assert not (run / "plots").exists() and "![" not in md  # no chart drawn, none embedded


def cpbench_without_torch(*args):
    """``cpbench *args`` in a fresh process where ``import torch`` fails (a real process: this one has torch)."""
    code = f"sys.path.insert(0, {str(Path(__file__).parent)!r}); import notorch; sys.argv = ['cpbench', *{list(map(str, args))!r}]; from cpbench.cli.app import main; main()"
    return subprocess.run([sys.executable, "-c", "import sys; " + code], capture_output=True, text=True,
                          timeout=180)


@pytest.mark.slow
def test_cli_plot_writes_every_chart_and_report_without_torch(tmp_path):
    """Every chart, drawn once (the slowest check of the suite): ``plot`` and ``report`` run where torch
    cannot be imported; each chart is a PNG of the house width and an SVG."""
    # three batch sizes at each length: the run-wide segments chart too (one cp_size and two lengths: every
    # chart, in about two thirds of the default grid's drawing time)
    run = make_run(tmp_path / "run", cp_sizes=(4,), seqs=(1024, 65536))
    r = cpbench_without_torch("plot", run)
    assert r.returncode == 0 and f"wrote {len(STEMS) + 1} charts" in r.stdout, (r.stdout, r.stderr)
    paths = sorted((run / "plots").iterdir())
    assert [p.name for p in paths] == sorted(f"{s}.{e}" for s in [*STEMS, "segments"] for e in ("png", "svg"))
    for p in paths:
        assert p.stat().st_size > 10_000, p
        if p.suffix == ".png":
            w, h = png_size(p)
            assert w == round(style.WIDTH_IN * style.PNG_DPI) and 300 < h < w * 1.2, (p, w, h)
        else:
            assert p.read_text().lstrip().startswith("<?xml") and "<svg" in p.read_text()
    r = cpbench_without_torch("report", run)  # the charts are drawn: report writes the text (charts: above)
    assert r.returncode == 0, r.stderr
    assert "![speedup](plots/speedup.png)" in (run / "report.md").read_text()


@pytest.mark.parametrize("setup", ["missing", "no_results", "schema"])
def test_cli_bad_run_dir_exits_2(tmp_path, setup):
    run = tmp_path / "run"
    if setup != "missing":
        run.mkdir()
    if setup == "schema":
        rows = make_rows(cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
        write_run(run, [{**r, "schema_version": 99} for r in rows], manifest_over={"schema_version": 99})
    for cmd in ("report", "plot"):
        r = cpbench(cmd, run)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
        assert "Traceback" not in r.stderr


def test_environment_table_sums_resumed_wall_times():
    from cpbench.report.run_report import environment_table

    assert "| sweep wall time (s) | 140.1 |" in environment_table({"sweep_wall_s": [140.1]})
    assert "| sweep wall time (s) | 60 + 30.5 = 90.5 (resumed) |" in environment_table({"sweep_wall_s": [60, 30.5]})
    big = {"config": {"model": {"name": "gpt-oss-120b", "window_left_per_layer": [127, -1] * 18}}, "note": "x" * 500}
    table = environment_table(big)
    assert "| config | `config` in `manifest.json` |" in table  # named where it is whole, not cut mid-JSON
    assert f"| note | {'x' * 399}… |" in table  # long text is still cut
    assert "| sweep wall time (s) | — |" in environment_table({})


def test_cli_report_warns_about_corrupt_jsonl_lines_and_keeps_the_rest(tmp_path, monkeypatch, text_reports):
    import cpbench.results.critical_path as results

    monkeypatch.setattr(results, "_WARNED", set(), raising=False)  # in-process: warned once per process
    run = make_run(tmp_path / "run", fmt="jsonl", cp_sizes=(2,), bss=(1,), seqs=(1024, 8192), timings=("eager",))
    lines = (run / "results.jsonl").read_text().splitlines()
    n = len(lines)
    (run / "results.jsonl").write_text("\n".join([lines[0], "garbage{", *lines[1:], '{"torn']) + "\n")
    r = cpbench("report", run)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"warning: {run / 'results.jsonl'}: line 2 is not a result row and was skipped",
        f"warning: {run / 'results.jsonl'}: line {n + 2} is cut off mid-row (a sweep stopped while writing it): that "
        "row is left out, and a --resume measures it again"]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert len(load_run(run)[0]) == n  # every real row kept


def test_merge_bullet_survives_odd_values():
    from cpbench.report.tables import merge_lines

    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",))
    assert [(r["rank"], r["mode"]) for r in rows][:2] == [(0, "two-call"), (0, "fused")]
    for r, v in zip(rows, ["10", "9", "inf", None, "abc", "2.5", -1, 3]):  # 4 ranks x 2 modes
        r["merge_kernels"] = v
    lines = merge_lines(prepare(pd.DataFrame(rows)))
    assert len(lines) == 1 and lines[0].endswith("bs 1, 1K tokens: 10 two-call, 9 fused."), lines


def test_notes_do_not_claim_every_cell_ran_when_modes_or_ranks_were_limited(tmp_path):
    rows = make_rows(cp_sizes=(4,), bss=(1,), seqs=(1024,), timings=("eager",))
    text = write_report(write_run(tmp_path / "fused", [r for r in rows if r["mode"] == "fused"]), charts=False).read_text()
    assert "Every cell ran" not in text  # the run's one mode is said once, not as a cell lacking a mode
    assert "- The run measured fused only (`--modes`): no cell has a fused-vs-two-call effect." in text
    text = write_report(write_run(tmp_path / "ranks", [r for r in rows if r["rank"] < 3]), charts=False).read_text()
    assert "Every cell ran" not in text
    assert "1 cell(s) measured only some ranks or modes (`--ranks`/`--mode`)" in text
    assert "e.g. cp 4 · bs 1 · 1K tokens · eager: two-call, fused on ranks 0–2." in text


@pytest.mark.slow
def test_cli_a_row_with_unreadable_extend_lens_is_left_out_by_line(tmp_path, rough_charts):
    """The report and its charts (drawn at 20 dpi) are made from the rows left."""
    run = make_run(tmp_path / "run", fmt="jsonl", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    rows[0]["extend_lens"] = [1, "a"]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cpbench("report", run)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "left out 1 row(s)" in r.stderr and "line 1: extend_lens" in r.stderr, r.stderr


@pytest.mark.parametrize("edit", ["samples", "schema", "manifest"])
def test_cli_hand_edited_runs_one_line_exit_2(tmp_path, edit):
    run = make_run(tmp_path / "run", fmt="jsonl", cp_sizes=(2,), bss=(1,), seqs=(1024,), timings=("eager",))
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    if edit == "samples":
        rows[0]["samples_us"] = [1, "x"]
    elif edit == "schema":
        rows[0]["schema_version"] = 1.7
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if edit == "manifest":
        (run / "manifest.json").write_text("[1, 2]")
    cmd = ("compare", run, run) if edit == "samples" else ("report", run)
    r = cpbench(*cmd)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-800:]
    assert len(r.stderr.strip().splitlines()) == 1 and str(run) in r.stderr


def test_cpu_speedup_chart_says_ratio_not_speedup_on_its_colour_bar(tmp_path):
    from cpbench.report.charts import charts_for

    d = prepare(pd.DataFrame(make_rows(cp_sizes=(2,), bss=(1, 4), seqs=(1024,), timings=("eager",))))
    for cpu, out in ((True, "cpu"), (False, "gpu")):  # the speedup chart only, as render_frame draws it
        name, fn, title, _ = next(c for c in charts_for(d, cpu) if c[0] == "speedup")
        fn(d, tmp_path / out, name, title)
    cpu_svg = (tmp_path / "cpu" / "speedup.svg").read_text()
    gpu_svg = (tmp_path / "gpu" / "speedup.svg").read_text()
    assert "a functional check, not a speedup" in cpu_svg and "fused faster" not in cpu_svg  # no colour bar
    assert "(blue: fused faster)" in gpu_svg


@pytest.mark.parametrize("title", ["gpt-oss-120b · flashinfer-fa3: " + "a very long chart title " * 12,
                                   "one forward\ncp 2 · bs 16 · 16K, 36 layers: " + "per-layer phase times " * 8])
def test_a_long_title_is_fitted_to_the_figure_width_line_by_line(title):
    fig, _ = style.new_figure()
    fig.suptitle(title)
    style.fit_suptitle(fig)
    t = fig._suptitle
    extent = t.get_window_extent(fig.canvas.get_renderer())
    assert extent.x0 >= 0 and extent.x1 <= fig.bbox.width  # nothing clipped at either edge
    assert t.get_fontsize() >= 8.0 and t.get_text().split() == title.split()  # wrapped, no word lost


def test_a_log_axis_labels_at_least_three_values_in_view():
    """#33: a latency axis over 1.3-150 ms carried two labels (10, 100)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cpbench.report.style import log_y

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1.3, 5.0, 150.0])
    log_y(ax)
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    shown = [t for t in ax.get_yticks() if lo <= t <= hi]
    assert len(shown) >= 3, shown
    plt.close(fig)


def test_charts_drawn_by_worker_processes_equal_those_drawn_in_process(tmp_path, monkeypatch):
    """The main job draws its charts in processes forked from a server (charts.render_frame, workers > 1): the
    same files, byte for byte for the PNGs, in the same order, as drawing them here."""
    from cpbench.report import charts

    drawn_apart = []
    real = charts._render_parallel
    monkeypatch.setattr(charts, "_render_parallel", lambda tasks, w: (real(tasks, w), drawn_apart.append(w))[0])
    df = pd.DataFrame(make_rows(cp_sizes=(2, 4), bss=(1, 4), seqs=(1024,), timings=("eager", "graph")))
    serial = render_frame(df, tmp_path / "serial", workers=1)
    assert drawn_apart == []
    parallel = render_frame(df, tmp_path / "parallel", workers=2)
    assert drawn_apart == [2]
    # worker processes import the caller's script: only the guarded CLI asks for them, a library call does not
    import inspect

    from cpbench import api
    from cpbench.report.run_report import write_report
    assert inspect.signature(render_frame).parameters["workers"].default == 1
    assert inspect.signature(write_report).parameters["chart_workers"].default == 1
    assert inspect.signature(api.sweep).parameters["chart_workers"].default == 1
    assert [p.name for p in parallel] == [p.name for p in serial] and len(serial) >= 2 * len(STEMS)
    for a, b in zip(serial, parallel):
        if a.suffix == ".png":
            assert a.read_bytes() == b.read_bytes(), a.name
