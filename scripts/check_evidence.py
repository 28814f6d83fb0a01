#!/usr/bin/env python3
"""Check the committed evidence: what the runs in docs/runs/ measured, and that every chart of them still
regenerates with this checkout's code. Not a unit test: the unit suite (``python3 -m pytest``) checks code
behaviour; this script checks the committed data that the README, docs/results.md, docs/usage.md and the reports
quote.

Usage: ``python3 scripts/check_evidence.py`` from anywhere (it imports this checkout's ``src/``);
``--print`` shows the headline rows of docs/results.md as the runs give them; ``--write-reports`` rewrites every committed
report.md from its rows (after an intended change to the report; review the diff).
Prints one line per check; exits 1 with a message on any failure, 0 when every check holds.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "runs"
README = ROOT / "README.md"
RESULTS_MD = ROOT / "docs" / "results.md"  # the result tables the README sums up
USAGE_MD = ROOT / "docs" / "usage.md"  # the engine read-back table
sys.path.insert(0, str(ROOT / "src"))  # this checkout's code, whatever cpbench is installed
os.environ.setdefault("MPLBACKEND", "Agg")

from cpbench.studies import study_reports  # noqa: E402
from cpbench.report.charts import CHARTS, DIST_CHARTS, render_all  # noqa: E402
from cpbench.report.run_report import render_report, write_report  # noqa: E402
from cpbench.results.critical_path import critical_path  # noqa: E402
from cpbench.results.schema import SCHEMA_VERSION, V3_BACKENDS  # noqa: E402
from cpbench.results.store import load_run  # noqa: E402


class EvidenceError(Exception):
    """A committed run does not hold what it is quoted for."""


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise EvidenceError(what)


def h200_run_holds_the_headline_counts() -> None:
    """gpt-oss-120b on flashinfer-fa3, cp 4: 72 attention kernels per rank two-call, 36 fused, outputs equal."""
    df, _ = load_run(RUNS / "h200-fa3-gpt-oss-120b")
    eager = df[(df["timing"] == "eager") & (df["status"] == "ok")]
    two, fused = eager[eager["mode"] == "two-call"], eager[eager["mode"] == "fused"]
    expect(set(two["attn_kernels"]) == {72}, f"two-call attention kernels {sorted(set(two['attn_kernels']))}, not {{72}}")
    expect(set(fused["attn_kernels"]) == {36}, f"fused attention kernels {sorted(set(fused['attn_kernels']))}, not {{36}}")
    expect(bool((fused["diff_vs_two_call"] == 0).all()), "a fused output differs from the two-call output")
    expect(eager["max_abs_err"].max() < 0.02, f"max_abs_err {eager['max_abs_err'].max()} >= 0.02")


def h200_default_sweep_is_complete_and_timed() -> None:
    """The default sweep (backend auto = FlashInfer's fa3 on the H200 then, read as flashinfer-fa3): every cell ok,
    one invocation, timed."""
    df, manifest = load_run(RUNS / "h200-fa3-gpt-oss-120b")
    expect(manifest["command"].startswith("cpbench sweep --cp 4 --bs 1,4,16 "), f"command {manifest['command']!r}")
    expect(manifest["config"]["backend"] == "flashinfer-fa3" and manifest["gpu_name"] == "NVIDIA H200",
           f"backend {manifest['config']['backend']!r} on {manifest['gpu_name']!r}")
    want = 9 * 4 * 2 * 2  # cells x ranks x modes x timings
    expect(len(df) == want and set(df["status"]) == {"ok"}, f"{len(df)} rows (want {want}), statuses {set(df['status'])}")
    wall = manifest["sweep_wall_s"]
    expect(len(wall) == 1 and wall[0] > 0, f"sweep_wall_s {wall}: not one timed invocation")


def h200_fa2_two_call_splits_kv_at_small_batch() -> None:
    """The flashinfer-fa2 run's finding: at bs 1 x 2K the two-call plans split KV (one merge kernel per call), the
    fused plan (twice the work) does not, and fused is > 3x faster; outputs differ by rounding only. Its report
    says so, and the flashinfer-fa3 run's report has no split-KV line."""
    df, _ = load_run(RUNS / "h200-fa2-gpt-oss-120b")  # stored rows read as a report reads them
    small = df[(df["bs"] == 1) & (df["max_extend_len"] == 2048) & (df["timing"] == "eager")]
    expect(set(small[small["mode"] == "two-call"]["merge_kernels"]) == {72}, "two-call merge kernels at bs 1 x 2K != 72")
    expect(set(small[small["mode"] == "fused"]["merge_kernels"]) == {0}, "fused merge kernels at bs 1 x 2K != 0")
    cp = critical_path(df)
    cell = cp[(cp["bs"] == 1) & (cp["max_extend_len"] == 2048)]
    expect(bool((cell["speedup"] > 3).all()), f"speedups at bs 1 x 2K {list(cell['speedup'])}, not all > 3")
    diff = df[df["mode"] == "fused"]["diff_vs_two_call"].max()
    expect(0 < diff <= 2 ** -6, f"fused vs two-call max diff {diff}, not in (0, 2^-6]")
    text = render_report(*load_run(RUNS / "h200-fa2-gpt-oss-120b"), "fa2")
    expect("Split-KV merge kernels per forward, gpt-oss-120b · flashinfer-fa2 · cp 4" in text,
           "the flashinfer-fa2 report has no split-KV line")
    expect("bs 1, 2K tokens: 72 two-call, 0 fused." in text,
           "the flashinfer-fa2 report does not give the bs 1 x 2K merge counts")
    expect("Split-KV" not in render_report(*load_run(RUNS / "h200-fa3-gpt-oss-120b"), "fa3"),
           "the flashinfer-fa3 report has a split-KV line")


def h200_forward_agrees_with_the_independent_script() -> None:
    """The breakable evidence run (docs/runs/h200-forward): every breakable row ran its segments as CUDA graphs
    with attention outputs equal to the eager forward's, and its forward ratios (two-call / fused on the
    layer-synchronised critical path) agree within ±1.5 % with benchmarks/breakable_check.py, which does not
    import cpbench, on the cells it timed (docs/evidence/h200-forward/independent-*.jsonl)."""
    import json

    from cpbench.report.data import cells
    from cpbench.studies.breakable.report import forward_cells

    df, manifest = load_run(RUNS / "h200-forward")
    br = df[(df["timing"] == "breakable") & (df["status"] == "ok")]
    expect(len(br) == 8 * 4 * 2 * 2, f"{len(br)} ok breakable rows, not 8 cells x 4 ranks x 2 modes x 2 backends")
    expect(set(br["segments"]) == {"graph"} and (br["diff_vs_eager"] == 0).all(),
           f"segments {set(br['segments'])}, max diff vs eager {br['diff_vs_eager'].max()}")
    fw = forward_cells(cells(df))
    checked = 0
    for backend, log in (("trtllm-fmha-v2", "trtllm-fmha-v2"), ("flashinfer-fa3", "fa3")):  # log: the file's name
        for line in (ROOT / "docs" / "evidence" / "h200-forward" / f"independent-{log}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            c = fw[(fw["backend"] == backend) & (fw["bs"] == rec["cell"]["bs"])
                   & (fw["max_extend_len"] == rec["cell"]["extend_len"])]
            expect(len(c) == 1, f"{backend} {rec['cell']}: no such breakable cell in h200-forward")
            off = float(c["speedup"].iloc[0]) / rec["crit_sync_ratio"] - 1
            expect(abs(off) <= 0.015, f"{backend} {rec['cell']}: cpbench {float(c['speedup'].iloc[0]):.4f} vs "
                                      f"independent {rec['crit_sync_ratio']:.4f} ({off:+.2%})")
            checked += 1
    expect(checked == 6, f"{checked} cells compared, not 6")


def h200_flex_line_is_what_results_md_says() -> None:
    """The flex line run (docs/runs/h200-flex-line): every flex row of the three modes is ok (matched the fp32
    reference), cp-native is recorded unsupported on FMHAv2, the ratios docs/results.md quotes are the run's
    (rendered as the report renders them), and cpbench's rank-0 cp-native / fused ratio agrees within ±1.5 % with
    benchmarks/flex_line_check.py, which does not import cpbench (harness.jsonl)."""
    import json

    from cpbench.studies.line.view import line_view
    from cpbench.results.verdicts import effect_text

    df, _ = load_run(RUNS / "h200-flex-line")
    flex = df[df["backend"] == "flex"]
    expect(len(flex) == 3 * 4 * 3 and (flex["status"] == "ok").all(), "flex rows not all ok (3 cells x 4 ranks x 3)")
    fmha = df[(df["backend"] == "trtllm-fmha-v2") & (df["mode"] == "cp-native")]
    expect(len(fmha) == 12 and (fmha["status"] == "unsupported").all(), "FMHAv2 cp-native rows not all unsupported")
    line = line_view(df).set_index("bs")
    results = " ".join(RESULTS_MD.read_text(encoding="utf-8").split())  # a figure may wrap a line
    for bs in (4, 16):
        r = line.loc[bs]
        for name in ("native_vs_fused", "fused_vs_two_call"):
            text = effect_text(r[name], r[f"{name}_ci_low"], r[f"{name}_ci_high"])
            expect(text in results, f"docs/results.md lacks bs {bs} {name} {text}")
    rank0 = flex[flex["rank"] == 0].set_index(["bs", "mode"])["latency_us_median"]
    for rec in map(json.loads, (RUNS / "h200-flex-line" / "harness.jsonl").read_text().splitlines()):
        ours = rank0[(rec["bs"], "fused")] / rank0[(rec["bs"], "cp-native")]
        off = ours / rec["native_vs_fused"] - 1
        expect(abs(off) <= 0.015, f"bs {rec['bs']}: cpbench cp-native/fused {ours:.4f} vs independent "
                                  f"{rec['native_vs_fused']:.4f} ({off:+.2%})")


def h200_flex_line_at_2k_and_16k() -> None:
    """The flex line at the other default lengths (docs/runs/h200-flex-line-2k, -16k), eager and graph: at 2K
    every flex row is ok (the worst error is rank 0's at bs 16, 0.0152, under the bf16 tolerance); at 16K every
    flex row that fits is ok and bs 16 is skipped (262144 tokens > --max-prefill-tokens); the quoted (docs/results.md)
    cp-native / fused figures are the runs' (16K eager, 2K graph); cpbench's rank-0 cp-native / fused agrees
    within ±1.5 % with benchmarks/flex_line_check.py (harness.jsonl) where the eager forward is not host-bound:
    bs 1 and 4 at 16K, bs 16 at 2K."""
    import json

    from cpbench.domain.tolerance import REFERENCE_TOLERANCE
    from cpbench.studies.line.view import line_view
    from cpbench.results.verdicts import effect_text

    results = " ".join(RESULTS_MD.read_text(encoding="utf-8").split())
    for name, timing, ok_bs in (("h200-flex-line-16k", "eager", (1, 4)), ("h200-flex-line-2k", "graph", (1, 4, 16))):
        df, _ = load_run(RUNS / name)
        flex = df[df["backend"] == "flex"]
        for bs in ok_bs:
            rows = flex[flex["bs"] == bs]
            expect(len(rows) > 0 and (rows["status"] == "ok").all(), f"{name}: flex bs {bs} rows not all ok")
            expect((rows["max_abs_err"] <= REFERENCE_TOLERANCE["bf16"]).all(), f"{name}: flex bs {bs} over tolerance")
        rest = flex[~flex["bs"].isin(ok_bs)]
        if name.endswith("16k"):
            expect(len(rest) > 0 and (rest["status"] == "skipped").all(), f"{name}: flex bs 16 rows not all skipped")
        else:
            worst = flex.loc[flex["max_abs_err"].idxmax()]
            expect((worst["bs"], worst["rank"], round(worst["max_abs_err"], 4)) == (16, 0, 0.0152) and "0.0152" in results,
                   f"{name}: flex's worst error is not docs/results.md's 0.0152 (rank 0, bs 16)")
        line = line_view(df)
        line = line[line["timing"] == timing].set_index("bs")
        for bs in ok_bs:
            r = line.loc[bs]
            text = effect_text(r["native_vs_fused"], r["native_vs_fused_ci_low"], r["native_vs_fused_ci_high"])
            expect(text in results, f"docs/results.md lacks {name} bs {bs} {timing} native_vs_fused {text}")
    for name, compared in (("h200-flex-line-16k", [1, 4]), ("h200-flex-line-2k", [16])):
        df, _ = load_run(RUNS / name)
        flex = df[(df["backend"] == "flex") & (df["timing"] == "eager")]
        rank0 = flex[flex["rank"] == 0].set_index(["bs", "mode"])["latency_us_median"]
        recs = {r["bs"]: r for r in map(json.loads, (RUNS / name / "harness.jsonl").read_text().splitlines())}
        expect(set(compared) <= set(recs), f"{name}: harness.jsonl lacks bs {compared}")
        for bs in compared:
            ours = rank0[(bs, "fused")] / rank0[(bs, "cp-native")]
            off = ours / recs[bs]["native_vs_fused"] - 1
            expect(abs(off) <= 0.015, f"{name} bs {bs}: cpbench cp-native/fused {ours:.4f} vs independent "
                                      f"{recs[bs]['native_vs_fused']:.4f} ({off:+.2%})")


def _read_back(traces_dir: Path, run: str, backend: str, mode: str):
    """profile --from's per-layer comparison of ``traces_dir`` beside ``run``'s cp4 bs1 ext8192 cell (gpt-oss-120b)."""
    from cpbench.kernels.backends.registry import BACKEND_NAMES, kernel_patterns
    from cpbench.studies.engine_traces.forwards import find_forwards, layer_times
    from cpbench.studies.engine_traces.traces import read_traces
    from cpbench.studies.engine_traces.compare import compare_layers, cpbench_layer_us

    windows = [127, -1] * 18
    patterns = {b: kernel_patterns(b) for b in BACKEND_NAMES if kernel_patterns(b)}
    traces = read_traces([traces_dir])
    engine = {t.rank: layer_times(find_forwards(t, patterns, 36).forwards, windows) for t in traces}
    rows, _ = load_run(RUNS / run)
    return compare_layers(engine, cpbench_layer_us(rows, cp_size=4, bs=1, max_extend_len=8192, backend=backend, mode=mode,
                                                   window_left_per_layer=windows))


def engine_read_back_is_what_usage_md_says() -> None:
    """docs/usage.md "Reading an engine's own traces": the per-layer table is what profile --from computes from the
    stand-in engine's H200 traces (fused) beside h200-engine-cell-fa3; every ratio of the engine (fused 0.99-1.01,
    two-call 0.99-1.04) and of cpbench's own profile beside h200-passes-a (0.98-1.00) is as docs/usage.md says; the
    two-call, unannotated and nsys read-backs give 72, 36 and 36 attention kernels per forward on every rank."""
    engine = ROOT / "docs" / "evidence" / "h200-engine-traces"
    usage = USAGE_MD.read_text(encoding="utf-8")
    by_rank: dict[int, list[str]] = {}
    for x in _read_back(engine / "cp4-bs1-ext8192-fused", "h200-engine-cell-fa3", "flashinfer-fa3", "fused"):
        expect(0.985 <= x.ratio < 1.015, f"engine fused rank {x.rank} {x.kind}: {x.ratio:.3f}")
        by_rank.setdefault(x.rank, []).append(f"{x.engine_median_us:.1f} [{x.engine_p10_us:.1f}–{x.engine_p90_us:.1f}] | "
                                              f"{x.cpbench_us:.1f} | {x.ratio:.2f}")
    for rank, parts in by_rank.items():
        line = f"| {rank} | " + " | ".join(parts) + " |"
        expect(line in usage, f"docs/usage.md lacks the read-back row {line}")
    for x in _read_back(engine / "cp4-bs1-ext8192-two-call", "h200-engine-cell-fa3", "flashinfer-fa3", "two-call"):
        expect(0.985 <= x.ratio < 1.045, f"engine two-call rank {x.rank} {x.kind}: {x.ratio:.3f}")
    from cpbench.kernels.backends.registry import BACKEND_NAMES, kernel_patterns
    from cpbench.studies.engine_traces.forwards import find_forwards
    from cpbench.studies.engine_traces.traces import read_traces

    patterns = {b: kernel_patterns(b) for b in BACKEND_NAMES if kernel_patterns(b)}
    for name, want in (("cp4-bs1-ext8192-two-call", [72] * 3), ("cp4-bs1-ext8192-fused-unannotated", [36] * 3)):
        got = [find_forwards(t, patterns, 36).per_forward() for t in read_traces([engine / name])]
        expect(got == [want] * 4, f"{name}: attention kernels per forward {got}")
    nsys = [find_forwards(t, patterns, 36, "prefill_forward").per_forward()
            for t in read_traces([engine / "nsys" / "engine-fused.sqlite"])]
    expect(nsys == [[36, 36]] * 2, f"the nsys export: attention kernels per forward {nsys}")
    own = RUNS / "h200-fmha-v2-profile" / "profiles"
    with tempfile.TemporaryDirectory() as tmp:
        for f in own.glob("*_fused.json.gz"):
            shutil.copy(f, tmp)
        for x in _read_back(Path(tmp), "h200-passes-a", "trtllm-fmha-v2", "fused"):
            expect(0.975 <= x.ratio < 1.005, f"cpbench's own rank {x.rank} {x.kind}: {x.ratio:.3f}")


def committed_runs_name_their_commit() -> None:
    """Every committed run's manifest (and so its report) names the code that measured it as PROVENANCE.md does:
    no ``-dirty`` sha of a copied tree, no ``HEAD``; where the tree's own metadata was wrong it is kept as
    ``git_commit_recorded``."""
    import json
    import re

    text = (RUNS / "PROVENANCE.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        base = None
        for n in re.findall(r"`([^`]+)`", line.split("|")[1]):
            name = base.rsplit("-", 1)[0] + n if n.startswith("-") and base else n
            base = base if n.startswith("-") else n
            rows[name] = line.split("|")[3]
    bad = []
    for d in sorted(p for p in RUNS.iterdir() if (p / "manifest.json").exists()):
        commit = str(json.loads((d / "manifest.json").read_text()).get("git_commit"))
        if commit.endswith("-dirty") or commit == "HEAD" or d.name not in rows or commit not in rows[d.name]:
            bad.append(f"{d.name} ({commit})")
    expect(not bad, f"{len(bad)} runs do not name PROVENANCE's commit: {', '.join(bad[:4])}")


# torchrun runs whose committed report holds the "Simulated vs real" section: the simulated run it was made with
SIMULATED_PAIRS = {"h200x2-fa3-torchrun": "h200x2-fa3-simulated", "h200x2-fa3-torchrun-nogather": "h200x2-fa3-simulated",
                   "h200x2-fa3-torchrun-separate": "h200x2-fa3-simulated",
                   "h200x2-fa3-tp8-mix-torchrun": "h200x2-fa3-tp8-mix-simulated"}


# a backend name fa2 / fa3 in a report rendered before schema 3 (not inside a run's or a chart's name)
OLD_BACKEND = re.compile(r"(?<![\w./-])(fa[23])(?![\w/-])")


def as_rendered_now(report: str, manifest: dict) -> str:
    """A committed report.md as this checkout renders it where only names changed since: a run of schema 1 or 2
    (rendered before FlashInfer's backends were renamed) with ``fa2`` / ``fa3`` as ``flashinfer-fa2`` /
    ``flashinfer-fa3``, as its rows and manifest are read (cpbench.results.schema.V3_BACKENDS); other reports
    as they are."""
    if manifest.get("schema_version", 1) >= SCHEMA_VERSION:
        return report
    return OLD_BACKEND.sub(lambda m: V3_BACKENDS[m.group(1)], report)


def committed_reports_are_current() -> None:
    """Every committed report.md is what this checkout's code renders from its run's rows (a stale report
    quotes numbers or wording the code no longer produces), backend names of a report rendered before schema 3
    read as they are now (:func:`as_rendered_now`: the committed runs are not rewritten). Regenerate one with
    ``cpbench report docs/runs/NAME`` (``--simulated docs/runs/SIM`` for SIMULATED_PAIRS)."""
    stale = []
    for run in sorted(p for p in RUNS.iterdir() if (p / "report.md").exists()):
        df, manifest = load_run(run)
        sim = SIMULATED_PAIRS.get(run.name)
        text = render_report(df, manifest, run.name, run / "plots", sim_df=load_run(RUNS / sim)[0] if sim else None,
                             sim_name=sim or "", studies=study_reports())
        if text != as_rendered_now((run / "report.md").read_text(encoding="utf-8"), manifest):
            stale.append(run.name + (f" (--simulated docs/runs/{sim})" if sim else ""))
    expect(not stale, f"{len(stale)} committed report(s) differ from what the code renders: {', '.join(stale)}; "
                      "regenerate with cpbench report docs/runs/NAME")


def back_to_back_runs_overlap() -> None:
    """#33's run-to-run evidence: two back-to-back runs of the default main job with two timing passes per cell
    (h200-passes-a, -b): their speedup intervals overlap in at least 15 of 16 cells, and each row holds 2 passes."""
    from cpbench.results.compare_speedup import overlaps, speedup_frame

    a, b = (load_run(RUNS / f"h200-passes-{r}")[0] for r in "ab")
    for df in (a, b):
        ok = df[df["status"] == "ok"]
        expect(set(ok["passes"]) == {2}, f"passes per row {sorted(set(ok['passes']))}, not {{2}}")
    j, m = overlaps(speedup_frame(a, b))
    expect(m == 16 and j >= 15, f"intervals overlap in {j} of {m} cells (need at least 15 of 16)")


def results_headline_rows() -> list[str]:
    """The rows of the two headline tables of docs/results.md, rendered from the runs they cite: the prefill forward
    (``h200-forward``: per backend the breakable answer and the graph-timed attention answer) and attention
    alone (``h200-fmha-v2-vs-fa3``, graph timing). ``--print`` shows them for pasting."""
    from cpbench.report.backend_answer import best_of
    from cpbench.report.data import cells
    from cpbench.report.tables import forward_text
    from cpbench.studies.breakable.report import forward_cells
    from cpbench.report.style import human_tokens
    from cpbench.report.tables import answer as verdict_effect, ms

    def answer(c) -> str:
        return verdict_effect(c) if c["status"] == "ok" else str(c["status"])

    rows = []
    view = cells(load_run(RUNS / "h200-forward")[0])
    fw = forward_cells(view)
    graph = view[view["timing"] == "graph"]
    for (bs, ext), g in fw[fw["status"] == "ok"].groupby(["bs", "max_extend_len"], sort=True):
        row = [str(bs), human_tokens(ext)]
        for b in ("trtllm-fmha-v2", "flashinfer-fa3"):
            att = graph[(graph["backend"] == b) & (graph["bs"] == bs) & (graph["max_extend_len"] == ext)]
            row += [forward_text(g[g["backend"] == b].iloc[0]), answer(att.iloc[0])]
        rows.append("| " + " | ".join(row) + " |")
    view = cells(load_run(RUNS / "h200-fmha-v2-vs-fa3")[0])
    graph = view[(view["timing"] == "graph") & (view["status"] == "ok")]
    for (bs, ext), g in graph.groupby(["bs", "max_extend_len"], sort=True):
        by = {r["backend"]: r for _, r in g.iterrows()}
        best = min(((best_of(c), b) for b, c in by.items()), key=lambda x: x[0][0])
        rows.append(f"| {bs} | {human_tokens(ext)} | {answer(by['trtllm-fmha-v2'])} | {answer(by['flashinfer-fa3'])} | "
                    f"{ms(best[0][0])} ({best[1]}, {best[0][1]}) |")
    return rows


def results_headline_tables_come_from_the_runs() -> None:
    """Every row of the headline tables of docs/results.md is what the cited run gives
    (:func:`results_headline_rows`)."""
    results = RESULTS_MD.read_text(encoding="utf-8")
    missing = [r for r in results_headline_rows() if r not in results]
    expect(not missing, f"{len(missing)} docs/results.md headline row(s) differ from the runs, e.g. "
                        f"{missing[0] if missing else ''} (python3 scripts/check_evidence.py --print shows them)")


def readme_answer_comes_from_the_runs() -> None:
    """The README's answer on an H200: every figure and count in its bullets is what the cited runs give. Of the
    forward (h200-forward, h200-fa3-breakable-all): a measurable saving in 3 of 20 cells (trtllm-fmha-v2 at bs 1
    and 4 x 2K, fa3 at bs 1 x 2K), ties elsewhere, flashinfer-fa3 a tie in every cell, attention 4-21 % of the
    forward, the host hidden in every cell. Attention alone (graph timing): trtllm-fmha-v2's largest saving and
    flashinfer-fa3's largest cost (h200-forward), fa3's largest saving and its 6 of 8 cells faster, none slower,
    and fa3's cp-native call a tie with the fused call in every cell (h200-fa3-modes-graph)."""
    from cpbench.report.data import cells
    from cpbench.studies.breakable.report import attention_share, forward_cells
    from cpbench.studies.line.view import line_view
    from cpbench.results.verdicts import effect_text, side_of_one

    readme = " ".join(README.read_text(encoding="utf-8").split())  # a figure may wrap a line

    def key(c) -> tuple[int, int]:
        return int(c["bs"]), int(c["max_extend_len"])

    def side(c) -> int | None:
        return side_of_one(c["speedup"], c["speedup_ci_low"], c["speedup_ci_high"])

    def quoted(c, what: str) -> None:
        text = effect_text(c["speedup"], c["speedup_ci_low"], c["speedup_ci_high"])
        expect(text in readme, f"README lacks {what} {text}")

    view = cells(load_run(RUNS / "h200-forward")[0])
    fw = forward_cells(view)
    fw = fw[fw["status"] == "ok"]
    fa3_fw = forward_cells(cells(load_run(RUNS / "h200-fa3-breakable-all")[0]))
    fa3_fw = fa3_fw[(fa3_fw["status"] == "ok") & (fa3_fw["backend"] == "fa3")]
    measurable = {}
    for frame in (fw, fa3_fw):
        for _, c in frame.iterrows():
            expect(side(c) in (0, 1), f"{c['backend']} forward {key(c)}: fused costs time")
            if side(c) == 1:
                measurable[(c["backend"], *key(c))] = c
    expect(set(measurable) == {("trtllm-fmha-v2", 1, 2048), ("trtllm-fmha-v2", 4, 2048), ("fa3", 1, 2048)}
           and len(fw) + len(fa3_fw) == 20, f"measurable forward savings {sorted(measurable)} of {len(fw) + len(fa3_fw)}")
    expect("a measurable share in only 3 of 20 cells" in readme, "README lacks the forward's count (3 of 20 cells)")
    for (backend, bs, ext), c in measurable.items():
        quoted(c, f"{backend} forward bs {bs} x {ext}")
    top = max(100 * (1 - 1 / float(c["speedup"])) for c in measurable.values())
    expect(f"at most +{top:.1f} %" in readme, f"README lacks the forward's largest saving (+{top:.1f} %)")
    shares = sorted(round(100 * attention_share(view, c)) for _, c in fw.iterrows())
    expect(f"attention is {shares[0]}–{shares[-1]} % of this forward" in readme,
           f"README lacks attention's share of the forward ({shares[0]}–{shares[-1]} %)")
    expect(bool(fw["host_hidden"].astype(bool).all()), "the host was not hidden in every forward cell")

    graph = view[(view["timing"] == "graph") & (view["status"] == "ok")]
    quoted(graph[graph["backend"] == "trtllm-fmha-v2"].sort_values("speedup").iloc[-1], "trtllm-fmha-v2's largest saving")
    quoted(graph[graph["backend"] == "flashinfer-fa3"].sort_values("speedup").iloc[0], "flashinfer-fa3's largest cost")
    modes = load_run(RUNS / "h200-fa3-modes-graph")[0]
    mv = cells(modes)
    fa3 = mv[(mv["timing"] == "graph") & (mv["status"] == "ok") & (mv["backend"] == "fa3")]
    sides = [side(c) for _, c in fa3.iterrows()]
    expect(len(fa3) == 8 and sides.count(1) == 6 and sides.count(-1) == 0, f"fa3 attention sides {sides}")
    expect("saves time in 6 of 8 cells, costing in none" in readme, "README lacks fa3's 6 of 8 cells")
    quoted(fa3.sort_values("speedup").iloc[-1], "fa3's largest saving")
    line = line_view(modes)
    line = line[(line["backend"] == "fa3") & (line["timing"] == "graph")]
    ties = [side_of_one(r["native_vs_fused"], r["native_vs_fused_ci_low"], r["native_vs_fused_ci_high"]) == 0
            for _, r in line.iterrows()]
    expect(len(ties) == 8 and all(ties), f"fa3 cp-native vs fused: ties {ties}")


def readme_quickstart_output_is_the_committed_run() -> None:
    """The README's CPU quickstart excerpt is the terminal output of the committed run docs/runs/cpu-quickstart:
    every pasted breakable row's two-call and fused ms are the run's critical path, and the check's counts the
    README gives (96 of 96 rows matched, 72 → 36 attention calls per rank) are its report's."""
    from cpbench.report.data import cells

    readme = README.read_text(encoding="utf-8")
    df, manifest = load_run(RUNS / "cpu-quickstart")
    expect(manifest["command"] == "cpbench sweep --cp 4 --bs 1,4,16", f"command {manifest['command']!r}")
    view = cells(df)
    br = {key: c for key, c in ((((int(c["bs"]), int(c["max_extend_len"])), c)
                                for _, c in view[view["timing"] == "breakable"].iterrows()))}
    rows = [[x.strip() for x in line.strip("│").split("│")] for line in readme.splitlines()
            if line.startswith("│") and line.count("│") == 7]
    expect(len(rows) >= 3, f"{len(rows)} pasted rows in the README's quickstart")
    for bs, ext, two, fused, *_ in rows:
        c = br[(int(bs), int(ext))]
        got = (f"{c['two_call_us'] / 1e3:.3f}", f"{c['fused_us'] / 1e3:.3f}")
        expect((two, fused) == got, f"README's bs {bs} x {ext}: {two} / {fused} ms, the run's {got[0]} / {got[1]}")
    report = (RUNS / "cpu-quickstart" / "report.md").read_text(encoding="utf-8")
    for text in ("96 of 96 rank × mode rows matched", "72 → 36 per rank"):
        expect(text in report, f"cpu-quickstart's report lacks {text!r}")
    flat = " ".join(readme.split())  # a phrase may wrap a line
    for text in ("96 of 96 rank × mode rows matched", "72 → 36 attention calls per rank"):
        expect(text in flat, f"README lacks {text!r}")


def charts_regenerate(name: str, charts: int) -> Callable[[], None]:
    def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / name
            shutil.copytree(RUNS / name, run, ignore=shutil.ignore_patterns("plots", "report.md"))
            pngs = [p for p in render_all(run, studies=study_reports()) if p.suffix == ".png"]
            small = [p.name for p in pngs if p.stat().st_size <= 5000]
            expect(len(pngs) == charts and not small, f"{len(pngs)} charts (want {charts}), tiny: {small}")
            expect("![speedup](plots/speedup.png)" in write_report(run, studies=study_reports()).read_text(),
                   "report.md embeds no speedup chart")

    check.__doc__ = (f"Every chart regenerates from {name} ({charts} charts, each > 5 kB), from older runs' columns "
                     "too (the memory chart of a run without measured memory says so instead of failing).")
    check.__name__ = f"charts_regenerate[{name}]"
    return check


def _anchors(md: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``md``: lower case, punctuation dropped, spaces as hyphens."""
    import re

    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#{1,6}\s+(.+)$", md.read_text(encoding="utf-8"), re.MULTILINE)}


def every_link_resolves() -> None:
    """Every relative link and image in README.md and docs/ (a committed report's charts too) names a file
    that is committed, and every ``#anchor`` a link gives into a Markdown file names one of its headings."""
    import re

    missing = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" not in target and not (md.parent / target).exists():
                missing.append(f"{md.relative_to(ROOT)} -> {target}")
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            page = md.parent / target if target else md
            if "://" not in target and page.suffix == ".md" and page.exists() and anchor not in _anchors(page):
                missing.append(f"{md.relative_to(ROOT)} -> {target}#{anchor}")
    expect(not missing, f"{len(missing)} links to missing files or headings: {', '.join(missing[:5])}")


CHECKS: list[Callable[[], None]] = [
    h200_run_holds_the_headline_counts,
    h200_default_sweep_is_complete_and_timed,
    h200_fa2_two_call_splits_kv_at_small_batch,
    h200_forward_agrees_with_the_independent_script,
    h200_flex_line_is_what_results_md_says,
    h200_flex_line_at_2k_and_16k,
    engine_read_back_is_what_usage_md_says,
    committed_runs_name_their_commit,
    committed_reports_are_current,
    results_headline_tables_come_from_the_runs,
    readme_answer_comes_from_the_runs,
    readme_quickstart_output_is_the_committed_run,
    back_to_back_runs_overlap,
    charts_regenerate("h200-fa3-cp2-cp8", len(CHARTS)),  # two batch sizes: no segments chart
    charts_regenerate("h200x2-fa3-torchrun", len(CHARTS) + len(DIST_CHARTS) + 1),  # bs 1, 4, 16: + segments
    every_link_resolves,
]


def main() -> int:
    if sys.argv[1:] == ["--print"]:
        print("\n".join(results_headline_rows()))
        return 0
    if sys.argv[1:] == ["--write-reports"]:  # after an intended change to the report: rewrite every committed one
        for run in sorted(p for p in RUNS.iterdir() if (p / "report.md").exists()):
            sim = SIMULATED_PAIRS.get(run.name)
            write_report(run, simulated=RUNS / sim if sim else None, charts=False, studies=study_reports())
            print(f"wrote {run / 'report.md'}")
        return 0
    failed = []
    for check in CHECKS:
        try:
            check()
        except EvidenceError as e:
            failed.append(f"{check.__name__}: {e}")
        except Exception:  # a run that no longer loads or renders is a failure too, with its traceback
            failed.append(f"{check.__name__}: {traceback.format_exc().rstrip()}")
        else:
            print(f"ok    {check.__name__}")
            continue
        print(f"FAIL  {failed[-1]}")
    if failed:
        print(f"check_evidence: {len(failed)} of {len(CHECKS)} checks failed", file=sys.stderr)
        return 1
    print(f"check_evidence: all {len(CHECKS)} checks hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
