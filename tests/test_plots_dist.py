"""Torchrun charts and report sections from synthetic torchrun rows (no GPU, no torch in the code under test)."""

import math
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from cpbench.results.store import load_run
from cpbench.results.verdicts import saved_share
from cpbench.report.charts import CHARTS, DIST_CHARTS, chart_stems, render_frame
from cpbench.report.data import prepare
from cpbench.report.dist_data import sim_vs_real, stacks, t_gather_us, topology_summary
from cpbench.report.dist_report import FORMULA
from cpbench.report.run_report import render_report
from cpbench.report.tables import ms
from clirun import cpbench
from runfactory import LAYERS, make_rows, make_run, write_run

CP, BSS, SEQS = 2, (1, 4), (1024, 4096)
DIST_MANIFEST = {"world_size": 2, "dist_backend": "nccl", "nccl_version": "2.27.3", "gather": "packed",
                 "nccl_env": {"NCCL_ALGO": "Ring"}, "gpu_topology": (
                     "\tGPU0\tGPU1\tNIC0\tCPU Affinity\n GPU0\t X \tNV18\tPXB\t0-63\n GPU1\tNV18\t X \tPXB\t0-63\n"
                     "NIC0\tPXB\tPXB\t X\n"),
                 "command": "cpbench sweep --launch torchrun --nproc-per-node 2 --cp 2"}


def sim_latency(model, backend, timing, cp, bs, seq, rank, mode):
    return 1000.0 * bs * seq / 1024 + (100.0 if mode == "two-call" else 0.0) + 10.0 * rank


def real_latency(*a):
    return 1.5 * sim_latency(*a) + 200.0


def phases_of(bs, seq, rank, mode):
    """Exact phase times, µs per forward: rank 1's gather is slower (it waits)."""
    attn = 0.8 * sim_latency("", "", "eager", CP, bs, seq, rank, mode)
    return {"attn_us": attn, "kv_write_us": 20.0 * bs, "gather_us": 150.0 * bs + (37.0 if rank == 1 else 0.0)}


def dist_rows(timings=("eager", "graph"), phases=True, noise=0.01):
    """Torchrun rows as the writer leaves them: launch columns, phase times on eager ok rows, and the
    cell-derived columns (wait_us, bus_gbps, critical_us_median) computed as results/derived.py does."""
    rows = make_rows(cp_sizes=(CP,), bss=BSS, seqs=SEQS, timings=timings, latency=real_latency, noise=noise)
    for r in rows:
        r.update(launch="torchrun", world_size=CP, gather="packed")
        if phases and r["timing"] == "eager" and r["status"] == "ok":
            r.update(phases_of(r["bs"], r["max_extend_len"], r["rank"], r["mode"]), gather_bytes=4096 * r["bs"] * r["max_extend_len"])
    df = pd.DataFrame(rows)
    for _, g in df.groupby(["timing", "bs", "max_extend_len", "mode"]):
        crit = float(np.median(np.max(np.vstack(g["samples_us"].tolist()), axis=0)))
        df.loc[g.index, "critical_us_median"] = crit
        if phases and "gather_us" in g and g["gather_us"].notna().all():
            fastest = g["gather_us"].min()
            df.loc[g.index, "wait_us"] = g["gather_us"] - fastest
            df.loc[g.index, "bus_gbps"] = (CP - 1) / CP * g["gather_bytes"] * LAYERS / (fastest * 1e-6) / 1e9
    return df


def sim_rows(**kw):
    return pd.DataFrame(make_rows(cp_sizes=(CP,), bss=BSS, seqs=SEQS, latency=sim_latency, **kw))


@pytest.fixture(scope="module")
def report_text():
    return render_report(dist_rows(), DIST_MANIFEST, "dist", plot_dir=None)


def test_phase_stacks_sum_to_each_ranks_phases():
    s = stacks(prepare(dist_rows()))
    assert len(s) == len(BSS) * len(SEQS) * CP * 2 and set(s["timing"]) == {"eager"}
    for _, r in s.iterrows():
        p = phases_of(r["bs"], r["max_extend_len"], r["rank"], r["mode"])
        assert r["total_us"] == pytest.approx(p["gather_us"] + p["kv_write_us"] + p["attn_us"])
        assert r["gather_own_us"] + r["wait_us"] == pytest.approx(p["gather_us"])
        assert r["wait_us"] == pytest.approx(37.0 if r["rank"] == 1 else 0.0)  # gather beyond the fastest rank's
        assert r["gather_own_us"] == pytest.approx(150.0 * r["bs"])


def test_report_gather_share_is_gather_over_latency(report_text):
    df = dist_rows()
    assert "## Real CP (torchrun)" in report_text
    eager = df[df["timing"] == "eager"]
    for (bs, seq), c in eager.groupby(["bs", "max_extend_len"]):
        share = {m: np.median(g["gather_us"] / g["latency_us_median"]) for m, g in c.groupby("mode")}
        wait = {m: g["wait_us"].max() / 1e3 for m, g in c.groupby("mode")}
        crit = {m: g["critical_us_median"].iloc[0] for m, g in c.groupby("mode")}
        section = report_text.split("## Real CP (torchrun)")[1]
        row = next(ln for ln in section.splitlines() if ln.startswith(f"| {bs} | {seq // 1024}K | "))
        assert f"| {100 * share['two-call']:.1f}% / {100 * share['fused']:.1f}% |" in row
        assert f"| {wait['two-call']:.4g} / {wait['fused']:.4g} |" in row
        sp = crit["two-call"] / crit["fused"]  # the speedup on the torchrun critical path, as the report prints it
        shown = row.split(" | ")[4].split(" [")[0]
        # the share of the two-call time fused saves, with the decimals its interval needs
        assert shown.endswith(" %") and abs(float(shown[:-2].replace("−", "-")) - 100 * saved_share(sp)) < 0.06, shown
    assert "- World size: 2 processes; distributed backend: nccl; K|V all-gather: packed." in report_text
    assert "NCCL version: 2.27.3; NCCL variables: `NCCL_ALGO=Ring`" in report_text
    assert "GPU topology: 2 GPUs; GPU↔GPU links: NV18 × 1 pair." in report_text


def test_bandwidth_estimate_equals_the_formula(report_text):
    assert t_gather_us(36, 4, 1e9, 50.0) == pytest.approx(36 * 0.75 * 1e9 / 50e9 * 1e6)
    assert FORMULA in report_text and "**Estimate, not a measurement**" in report_text
    df = dist_rows()
    eager = df[df["timing"] == "eager"]
    lines = report_text.splitlines()
    for (bs, seq, mode), g in eager.groupby(["bs", "max_extend_len", "mode"]):
        nbytes = 4096 * bs * seq
        work = (g["attn_us"] + g["kv_write_us"]).max()
        row = next(ln for ln in lines if ln.startswith(f"| gpt-oss-120b | {CP} | {bs} | {seq // 1024}K | {mode} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        est = {bw: LAYERS * (CP - 1) / CP * nbytes / (bw * 1e9) * 1e6 for bw in (50, 25)}
        assert cells[-4:] == [f"{est[50] / 1e3:.4g}", f"{(work + est[50]) / 1e3:.4g}",
                              f"{est[25] / 1e3:.4g}", f"{(work + est[25]) / 1e3:.4g}"]
        assert cells[6] == f"{g['gather_us'].min() / 1e3:.4g}"  # measured, fastest rank


def test_a_torchrun_run_gets_every_chart(tmp_path, undrawn_charts):
    paths = render_frame(dist_rows(), tmp_path)
    names = {p.name for p in paths}
    stems = [n for n, *_ in CHARTS] + [n for n, *_ in DIST_CHARTS]
    assert names == {f"{s}.{e}" for s in stems for e in ("png", "svg")}


@pytest.mark.slow
def test_dist_charts_written_png_and_svg(tmp_path):
    d = prepare(dist_rows())
    for s, fn, title, _ in DIST_CHARTS:  # drawn as render_frame draws them (one model and backend: the frame)
        assert [p.name for p in fn(d, tmp_path, s, title)] == [f"{s}.png", f"{s}.svg"]
        assert (tmp_path / f"{s}.png").stat().st_size > 10_000 and "<svg" in (tmp_path / f"{s}.svg").read_text()


def test_the_timeline_lays_each_ranks_layers_end_to_end_in_phase_order(monkeypatch):
    """Per mode and rank, each layer is drawn as its wait, own all-gather, KV write and attention (the rank's
    phase times / num_layers, ms), layer after layer from 0: one bar set per phase, a bar per layer."""
    from matplotlib.collections import PolyCollection

    from cpbench.report import style
    from cpbench.report.dist_data import representative_cell
    from cpbench.report.phases import PHASES, TIMELINE_ORDER, timeline_chart

    figs = []
    monkeypatch.setattr(style, "save", lambda fig, out_dir, name: figs.append(fig) or [])
    d = prepare(dist_rows())
    timeline_chart(d, Path("unused"), "timeline", "t")
    c = representative_cell(d)
    colour = {col: mcolor for col, _, mcolor, _ in PHASES}
    (fig,) = figs
    assert [ax.get_title() for ax in fig.axes] == ["two-call", "fused"]
    for ax, mode in zip(fig.axes, ("two-call", "fused")):
        sets = [pc for pc in ax.collections if isinstance(pc, PolyCollection)]
        assert len(sets) == CP * len(TIMELINE_ORDER)
        for i in range(CP):  # rank i, drawn in row i
            row = c[(c["mode"] == mode) & (c["rank"] == i)].iloc[0]
            widths = [row[col] / LAYERS / 1e3 for col in TIMELINE_ORDER]
            assert min(widths) >= 0 and widths[-1] > 0  # the attention of every layer is drawn
            mine = sets[i * len(TIMELINE_ORDER):(i + 1) * len(TIMELINE_ORDER)]
            bars = []  # (x0, width, phase) of every bar of this rank
            for col, pc in zip(TIMELINE_ORDER, mine):
                assert matplotlib.colors.same_color(pc.get_facecolor()[0], colour[col])
                for path in pc.get_paths():
                    (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
                    assert (y0, y1) == pytest.approx((i - 0.35, i + 0.35))
                    bars.append((x0, x1 - x0, col))
            bars.sort(key=lambda b: (b[0], TIMELINE_ORDER.index(b[2])))
            assert [b[2] for b in bars] == list(TIMELINE_ORDER) * LAYERS  # layer after layer, in phase order
            assert [b[1] for b in bars] == pytest.approx(widths * LAYERS)
            ends = np.cumsum([0.0] + [b[1] for b in bars])
            assert [b[0] for b in bars] == pytest.approx(ends[:-1].tolist())  # end to end from 0


@pytest.mark.parametrize("frame", ["simulated", "no_phases", "graph_only"])
def test_dist_charts_skipped_without_phase_times(frame):
    df = {"simulated": lambda: sim_rows(), "no_phases": lambda: dist_rows(phases=False),
          "graph_only": lambda: dist_rows(timings=("graph",))}[frame]()
    stems = {stem for stem, *_ in chart_stems(prepare(df))}  # what render_frame would draw
    assert stems == {s for s, *_ in CHARTS} and stems.isdisjoint(s for s, *_ in DIST_CHARTS)
    assert {s for s, *_ in chart_stems(prepare(dist_rows()))} == {s for s, *_ in CHARTS + DIST_CHARTS}


def test_simulated_report_has_no_torchrun_section(tmp_path):
    run = make_run(tmp_path / "sim", cp_sizes=(2,), bss=(1,), seqs=(1024,))
    text = render_report(*load_run(run), "sim")
    assert "Real CP (torchrun)" not in text and "Simulated vs real" not in text and "timeline" not in text


def test_torchrun_run_without_phases_still_reports():
    text = render_report(dist_rows(timings=("graph",)), DIST_MANIFEST, "g")
    assert "## Real CP (torchrun)" in text and "_No eager torchrun cell with phase times" in text


def test_sim_vs_real_matches_cells_and_takes_the_difference():
    real, sim = dist_rows(noise=0), sim_rows(noise=0)
    m = sim_vs_real(prepare(real), prepare(sim))
    assert len(m) == len(BSS) * len(SEQS) * 2 * 2  # cells x modes x timings
    for _, r in m.iterrows():
        args = ("gpt-oss-120b", "flashinfer-fa3", r["timing"], CP, r["bs"], r["max_extend_len"])
        want_sim = max(sim_latency(*args, k, r["mode"]) for k in range(CP))
        want_real = max(real_latency(*args, k, r["mode"]) for k in range(CP))
        assert r["sim_us"] == pytest.approx(want_sim) and r["real_us"] == pytest.approx(want_real)
        assert r["diff_us"] == pytest.approx(want_real - want_sim)
    assert sim_vs_real(prepare(real), prepare(real)).empty  # a torchrun run is no simulated baseline


@pytest.mark.slow
def test_cli_report_simulated_adds_table_and_chart_without_torch(tmp_path):
    real = write_run(tmp_path / "real", dist_rows(noise=0).to_dict("records"), manifest_over=DIST_MANIFEST)
    sim = write_run(tmp_path / "sim", sim_rows(noise=0).to_dict("records"))
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import notorch, onlycharts; "
            "sys.argv = ['cpbench', 'report', "
            f"{str(real)!r}, '--simulated', {str(sim)!r}]; from cpbench.cli.app import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "CPBENCH_TEST_CHARTS": "sim_vs_real,timeline"})
    assert r.returncode == 0, r.stderr
    text = (real / "report.md").read_text()
    assert "## Simulated vs real critical path" in text and "Simulated run: `sim`" in text
    assert "![sim_vs_real](plots/sim_vs_real.png)" in text and (real / "plots" / "sim_vs_real.svg").exists()
    assert (real / "plots" / "timeline.png").exists() and "![timeline](plots/timeline.png)" in text
    args = ("", "", "eager", CP, 4, 4096, 1, "fused")  # rank 1 is the slowest in both runs
    real_us, sim_us = real_latency(*args), sim_latency(*args)
    row = next(ln for ln in text.splitlines() if f"| eager | {CP} | 4 | 4K | fused | " in ln)
    assert row.endswith(f"| {ms(sim_us)} | {ms(real_us)} | {(real_us - sim_us) / 1e3:.4g} | "
                        f"{real_us / sim_us:.2f}× |")
    bad = cpbench("report", real, "--simulated", tmp_path / "nope")
    assert bad.returncode == 2 and "nope" in bad.stderr + bad.stdout


def test_concatenated_run_compares_its_own_launches(tmp_path):
    both = pd.concat([dist_rows(noise=0), sim_rows(noise=0)], ignore_index=True)
    run = write_run(tmp_path / "both", both.to_dict("records"), manifest_over=DIST_MANIFEST)
    text = render_report(*load_run(run), "both")
    assert "## Real CP (torchrun)" in text and "## Simulated vs real critical path" in text
    assert "- fused: real / simulated median" in text


def test_topology_summary():
    assert topology_summary(None) == "—" and topology_summary("garbage") == "—"
    topo = "\tGPU0\tGPU1\tGPU2\n GPU0\t X \tNV18\tSYS\nGPU1\tNV18\t X \tNV18\nGPU2\tSYS\tNV18\t X \n"
    assert topology_summary(topo) == "3 GPUs; GPU↔GPU links: NV18 × 2 pairs, SYS × 1 pair"
    assert not math.isnan(t_gather_us(1, 1, 10, 1)) and t_gather_us(1, 1, 10, 1) == 0.0


def test_report_simulated_refuses_the_wrong_kind_of_run(tmp_path, text_reports):
    real = write_run(tmp_path / "real", dist_rows(noise=0).to_dict("records"), manifest_over=DIST_MANIFEST)
    real2 = write_run(tmp_path / "real2", dist_rows(noise=0).to_dict("records"), manifest_over=DIST_MANIFEST)
    sim = write_run(tmp_path / "sim", sim_rows(noise=0).to_dict("records"))
    other = write_run(tmp_path / "other", make_rows(cp_sizes=(CP,), bss=(3,), seqs=(777,)))
    for run, simulated, words in ((real, real, "is the run itself"), (sim, real, "holds no torchrun rows"),
                                  (real, real2, "holds no simulated rows")):
        r = cpbench("report", run, "--simulated", simulated)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = cpbench("report", real, "--simulated", other)  # a simulated run of other cells: a warning, not a wrong table
    assert r.returncode == 0 and "no cell of" in r.stderr and "matches a cell of" in r.stderr
