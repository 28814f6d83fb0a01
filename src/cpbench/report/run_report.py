"""``RUN/report.md``: a GitHub-renderable report of one run (no torch; reads only the run directory).

Sections: summary (computed on the critical path; a CPU run's opens with why it makes no speedup claim,
:data:`CPU_NOTE`), environment (manifest), exact repro command,
results tables per cp_size, kernel counts, charts (relative ``plots/*.png``), notes on cells that did
not run, clock drops and other caveats.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd

from cpbench.domain.eligibility import DEFAULT_RULE, CpRule, parse_rule
from cpbench.results.critical_path import incomplete_reason, missing_rows
from cpbench.results.keys import canon
from cpbench.results.planned import PLANNED_CELL_KEYS, valid_planned_cells
from cpbench.results.policy import clock_drop_text
from cpbench.domain.modes import ALL_MODES, Mode, Status
from cpbench.results.schema import CELL_COLUMNS, MODES, V3_BACKENDS
from cpbench.results.store import RunDir, as_utf8, load_run
from cpbench.results.verdicts import CPU_CLAIM, TIE_BAND
from cpbench.report.backend_answer import backend_answer
from cpbench.report.charts import chart_stems, device_name, omitted_charts, render_frame
from cpbench.report.study import StudyReport
from cpbench.report.costs import counts_missing, kernel_counts
from cpbench.errors import CpbenchInputError, CpbenchWarning
from cpbench.report.data import cells, groups, on_cpu, one_view, prepare
from cpbench.results.critical_path import span_text
from cpbench.report.dist_data import sim_vs_real
from cpbench.report.dist_report import real_cp_section, sim_vs_real_section
from cpbench.report.precision import precision_section
from cpbench.report.resources import resources_section
from cpbench.report.units import human_tokens
from cpbench.report.tables import (cell_tables, kernel_lines, kernel_table, md_table, merge_lines, modes_text,
                                   ran_lines, reference_check_lines, summary_lines)
from cpbench.report.workloads import cp_share_lines, workload_sections

ENV_KEYS = (("gpu_name", "GPU"), ("compute_capability", "compute capability"), ("driver", "driver"),
            ("cuda", "CUDA"), ("torch", "torch"), ("flashinfer", "flashinfer"), ("python", "Python"),
            ("cpu", "CPU"), ("cpbench_version", "cpbench"), ("git_commit", "git commit"),
            ("created", "created"), ("sweep_wall_s", "sweep wall time (s)"),
            ("sweep_phase_s", "where the time went (s)"), ("timing_method", "timing method"),
            ("schema_version", "results schema"))
MAX_NOTES = 60
MAX_PLANNED = 200_000  # planned cells (x timings) a report lists missing ones of; a sweep plans at most 100,000


GPU_KEYS = ("gpu_name", "compute_capability", "driver", "cuda", "flashinfer")
CPU_NOTE = (f"**A CPU run: a {CPU_CLAIM}.** Every cell ran on the CPU; "
            "its timings move by tens of percent between runs, so this report makes no speedup claim and draws no "
            "rank imbalance from them. What it shows: which cells and ranks ran in each mode, whether their outputs "
            "matched the fp32 reference (a `mismatch` status where not), and the attention calls per forward "
            "(two-call vs fused).")


def environment_table(manifest: dict, cpu: bool = False) -> str:
    """Markdown table of the manifest: known keys first (missing ones shown as —), then any other key;
    ``cpu``: without the GPU rows (GPU, compute capability, driver, CUDA, flashinfer)."""
    walls = manifest.get("sweep_wall_s")
    if (isinstance(walls, list) and walls  # one entry per invocation (a resumed sweep has several)
            and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in walls)):
        manifest = {**manifest, "sweep_wall_s": " + ".join(f"{w:g}" for w in walls)
                    + (f" = {sum(walls):g} (resumed)" if len(walls) > 1 else "")}
    parts = manifest.get("sweep_phase_s")
    if isinstance(parts, list) and parts:  # summed over invocations, like the wall time beside it
        total: dict[str, float] = {}
        for part in parts:
            for k, v in (part.items() if isinstance(part, dict) else ()):
                if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e9 and v == v:
                    total[str(k)] = total.get(str(k), 0.0) + float(v)  # hand-edited huge or NaN values: left out
        manifest = {**manifest, "sweep_phase_s": ", ".join(f"{k} {v:.1f}" for k, v in total.items())
                    + (" (all invocations)" if len(parts) > 1 else "")}
    rows = []
    for key, label in ENV_KEYS:
        if (cpu and key in GPU_KEYS) or (key == "sweep_phase_s" and key not in manifest):
            continue
        methods = timing_methods(manifest) if key == "timing_method" else []
        if len(methods) > 1:  # a resume that timed otherwise: each method, with the invocations it timed
            rows += [[f"{label} (invocation{'s' if len(runs) > 1 else ''} {span_text(runs)})", _short(m)]
                     for m, runs in methods]
        else:
            rows.append([label, _short(manifest.get(key, "—"))])
    # the launch's NCCL variables and GPU topology are summarised in the Real CP section
    known = {k for k, _ in ENV_KEYS} | {"command", "command_as_recorded", "gpu_topology", "nccl_env", "gemm_peak",
                                        "timing_methods"}
    known |= {"flashinfer_cubin", "sm_count"} if cpu else set()
    rows += [[k, _short(v, k)] for k, v in sorted(manifest.items()) if k not in known]
    return md_table(["", "value"], rows)


def timing_methods(manifest: dict) -> list[tuple[str, list[int]]]:
    """The distinct timing methods of a run's invocations, in first-use order, each with the invocations
    (numbered from 1) that used it: from ``timing_methods`` (one entry per invocation; None where an older
    cpbench did not record it), else the one ``timing_method``."""
    methods = manifest.get("timing_methods")
    if not isinstance(methods, list) or not methods:
        methods = [manifest.get("timing_method")]
    out: dict[str, list[int]] = {}
    for i, m in enumerate(methods, start=1):
        if isinstance(m, str) and m:
            out.setdefault(m, []).append(i)
    return list(out.items())


def _short(v, key: str | None = None) -> str:
    """A manifest value for the table: text up to 400 characters (cut with …), a structure as JSON up to 120;
    a longer structure (``config``, ``planned``) is named where it is whole instead of cut mid-way."""
    if v is None or v == "":
        return "—"
    s, limit = (v, 400) if isinstance(v, str) else (json.dumps(v, default=str), 120)
    if len(s) <= limit:
        return s
    return f"`{key}` in `manifest.json`" if key and not isinstance(v, str) else s[: limit - 1] + "…"


READING_GUIDE = (
    "Speedup = two-call / fused on that path, printed everywhere (tables, charts, the console, `cpbench compare`) in "
    "one unit: the share of the two-call time fused saves, signed, in percent (1 − 1 / speedup: 1.25× is +20.0 %), "
    "with its 95 % interval in brackets in the same unit: `+0.7 % [+0.1, +1.4]` (+ saves, − costs; a column that "
    "names other modes reads the same way, e.g. the share of the fused time cp-native saves). The interval is a "
    "bootstrap that resamples each rank's raw samples and recomputes the critical path; where a verdict is shown, "
    "faster when the interval lies above 0, slower when below, a tie when it contains 0 (without raw samples: a "
    "speedup within ±{band}). × marks only ratios that are no such effect (kernel counts, real / simulated).")
"""The report's reading guide to its effects (docs/design.md §4, "One unit for every effect")."""

def all_ran(modes) -> str:
    """The notes' line when nothing is to be noted: every cell ran on every rank in the run's ``modes``."""
    return f"- Every cell ran on every rank in {modes_text(modes)}."


ALL_RAN = all_ran(MODES)
ALL_RAN_THREE = all_ran(ALL_MODES)  # a run with cp-native rows


def notes(df: pd.DataFrame) -> list[str]:
    """Bullets for rows that did not run (grouped by cell, status and reason, with modes and ranks),
    and for rows whose SM clock dropped while timing."""
    out = []
    bad = df[df["status"] != Status.OK]
    keys = list(CELL_COLUMNS) + ["status", "reason"]
    for k, g in bad.groupby(keys, sort=True):
        c = dict(zip(keys, k))
        ranks = sorted(set(g["rank"]))
        rtxt = f"rank{'s' if len(ranks) > 1 else ''} {span_text(ranks)}"
        out.append(f"- {c['model']} · {c['backend']} · {c['timing']} · cp {c['cp_size']} · bs {c['bs']} · "
                   f"{human_tokens(c['max_extend_len'])} tokens" + (f" + {human_tokens(c['prefix_len'])} prefix"
                                                              if c["prefix_len"] > 0 else "")
                   + f": **{c['status']}** ({', '.join(m for m in ALL_MODES if m in set(g['mode']))}; {rtxt})"
                   + (f": {c['reason']}" if c["reason"] else ""))
    if len(out) > MAX_NOTES:
        out = out[:MAX_NOTES] + [f"- … and {len(out) - MAX_NOTES} more (see results.csv)."]
    partial, incomplete = [], []
    run_modes = set(df["mode"])
    pair = set(MODES) <= run_modes  # a run without two-call or fused: said once, below, not of every cell
    for k, g in df.groupby(list(CELL_COLUMNS), sort=True):
        c = dict(zip(CELL_COLUMNS, k))
        modes = [m for m in ALL_MODES if m in set(g["mode"])]
        ranks = sorted({int(r) for r in g["rank"].dropna()})
        lacking = missing_rows(g, run_modes)
        if lacking:
            incomplete.append(f"- {c['model']} · {c['backend']} · {c['timing']} · cp {c['cp_size']} · "
                              f"bs {c['bs']} · {human_tokens(c['max_extend_len'])} tokens: **incomplete**, "
                              f"{incomplete_reason(lacking)}; "
                              "no critical path or speedup is computed from the ranks present.")
        elif (pair and not set(MODES) <= set(modes)) or ranks != list(range(int(c["cp_size"]))):
            partial.append(f"cp {c['cp_size']} · bs {c['bs']} · {human_tokens(c['max_extend_len'])} tokens · "
                           f"{c['timing']}: {', '.join(modes)} on rank{'s' if len(ranks) > 1 else ''} "
                           f"{span_text(ranks)}")
    out += incomplete
    if not pair:
        out.append(f"- The run measured {modes_text(run_modes)} only (`--modes`): no cell has a fused-vs-two-call "
                   "effect.")
    if partial:
        out.append(f"- {len(partial)} cell(s) measured only some ranks or modes (`--ranks`/`--mode`), so they have no "
                   f"critical-path speedup: e.g. {partial[0]}.")
    drop = df[df["clock_drop"].map(lambda v: v is True or v == 1 or str(v).lower() == "true")]
    if len(drop):
        out.append(f"- SM clock dropped by more than {clock_drop_text()} while timing {len(drop)} row(s) "
                   f"(e.g. cp {drop.iloc[0]['cp_size']}, bs {drop.iloc[0]['bs']}, "
                   f"{human_tokens(drop.iloc[0]['max_extend_len'])} tokens, {drop.iloc[0]['mode']}); treat those numbers "
                   "with care.")
    return out or [all_ran(run_modes)]


def run_rule(manifest: dict) -> CpRule:
    """The eligibility rule the run was measured under (its manifest config; runs before the option: ``pr``)."""
    cfg = manifest.get("config") or {}
    try:
        return parse_rule(cfg.get("cp_min_extend"), cfg.get("cp_min_tokens"))
    except CpbenchInputError:
        return DEFAULT_RULE


def missing_cells(df: pd.DataFrame, manifest: dict) -> list[str]:
    """Bullets for cells a sweep of the run planned but the results do not hold (a sweep that was stopped:
    ``cpbench sweep ... --resume`` measures them). The plans are the manifest's ``planned``, one per
    invocation (a resume may name other cells; the config's lists are their union, which would plan cells
    no command asked for), or its config for a run made before that record."""
    keyed = _missing_planned_cells(df, manifest.get("planned_cells"))
    if keyed is not None:
        return keyed
    cfg = manifest.get("config") or {}
    if not isinstance(cfg, dict) or not cfg.get("cp_sizes"):
        return []
    planned = manifest.get("planned")  # a manifest from before planned_cells: re-plan from the options
    plans = planned if isinstance(planned, list) and planned and all(isinstance(p, dict) for p in planned) else [cfg]
    kinds = (("cp_sizes", int), ("bs_list", int), ("extend_len_list", int), ("timings", str), ("extend_lens", int))
    bad = next(((k, p[k]) for p in plans for k, kind in kinds if p.get(k) is not None and not _list_of(p[k], kind)),
               None)
    if bad or (cfg.get("batches") and not all(isinstance(b, list) and b and _list_of(b[0], int) and b[0]
                                              for b in cfg["batches"])):
        what = f"{bad[0]} {bad[1]!r}" if bad else "batches"
        return [f"- manifest.json's config holds {what[:80]}, not a list this cpbench reads: the cells a stopped "
                "sweep left out cannot be listed."]
    def shapes(plan: dict) -> list:  # (bs, longest extend) of each batch a plan names
        if cfg.get("batches"):  # a length mix or trace (the same in every invocation): every batch's shape
            return list(dict.fromkeys((len(e), max(e)) for e, _ in cfg["batches"]))
        if plan.get("extend_lens"):
            return [(len(plan["extend_lens"]), max(plan["extend_lens"]))]
        return [(b, q) for b in plan.get("bs_list") or [] for q in plan.get("extend_len_list") or []][:MAX_PLANNED + 1]

    total = sum(len(plan.get("cp_sizes") or []) * len(shapes(plan)) * len(plan.get("timings") or []) for plan in plans)
    if total > MAX_PLANNED:
        return [f"- manifest.json plans more than {MAX_PLANNED:,} cells, more than a sweep runs (an edited file?): "
                "the cells a stopped sweep left out are not listed."]
    cells = {}  # (cp, bs, longest extend, timing), in plan order
    for plan in plans:
        cells.update(dict.fromkeys((cp, bs, seq, timing) for cp in plan.get("cp_sizes") or []
                                   for bs, seq in shapes(plan) for timing in plan.get("timings") or []))
    have = set(zip(df["cp_size"].astype(int), df["bs"].astype(int), df["max_extend_len"].astype(int), df["timing"]))
    out = [f"- cp {cp} · bs {bs} · {human_tokens(seq)} tokens · {timing}: **not measured** "
           "(the sweep stopped before this cell; rerun its command with `--resume`)"
           for cp, bs, seq, timing in sorted(cells, key=lambda c: c[:3]) if (cp, bs, seq, timing) not in have]
    return out if len(out) <= MAX_NOTES else out[:MAX_NOTES] + [f"- … and {len(out) - MAX_NOTES} more not measured."]


def _missing_planned_cells(df: pd.DataFrame, planned) -> list[str] | None:
    """The not-measured bullets of :func:`missing_cells` from the manifest's ``planned_cells`` (the cell keys
    the sweeps planned: cp_size, bs, max_extend_len, batch, timing), diffed against the rows' keys; None when
    the manifest has no such list (written before it, or edited into something else). An entry that is no cell
    key is left out with a warning (results.planned; a manifest read by the run directory has none left)."""
    fields = PLANNED_CELL_KEYS
    if not isinstance(planned, list):
        return None
    planned = valid_planned_cells(planned, "manifest.json")
    if len(planned) > MAX_PLANNED:
        return [f"- manifest.json plans more than {MAX_PLANNED:,} cells, more than a sweep runs (an edited file?): "
                "the cells a stopped sweep left out are not listed."]
    batch = df["batch"] if "batch" in df else pd.Series(0, index=df.index)
    have = {tuple(map(canon, k)) for k in zip(df["cp_size"], df["bs"], df["max_extend_len"], batch, df["timing"])}
    gone = {}  # key -> the planned cell, in plan order, once
    for c in planned:
        key = tuple(canon(c[f]) for f in fields)
        if key not in have:
            gone.setdefault(key, c)
    gone = list(gone.values())
    out = [f"- cp {c['cp_size']} · bs {c['bs']} · {human_tokens(int(c['max_extend_len']))} tokens"
           + (f" · batch {c['batch']}" if c["batch"] else "") + f" · {c['timing']}: **not measured** "
           "(the sweep stopped before this cell; rerun its command with `--resume`)" for c in gone]
    return out if len(out) <= MAX_NOTES else out[:MAX_NOTES] + [f"- … and {len(out) - MAX_NOTES} more not measured."]


def _list_of(v, kind: type) -> bool:
    """``v`` is a list of ``kind`` (bools are not ints)."""
    return isinstance(v, list) and all(isinstance(x, kind) and not isinstance(x, bool) for x in v)


def without_out(command: str) -> str:
    """``command`` (a shell line) without its ``--out DIR``/``--out=DIR`` and ``--resume``: the directory holds this
    run already, so the line as recorded would be refused; without them it writes a new run directory. A line that
    does not parse as shell words is returned unchanged."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w == "--out":
            skip = True
        elif not (w.startswith("--out=") or w == "--resume"):
            out.append(w)
    return shlex.join(out) if len(out) < len(words) else command


def reproduce_lines(manifest: dict) -> list[str]:
    """The "Reproduce" section: the first command, then every ``--resume`` command that followed it (one
    that changed the options may have added cells), each with the environment variables it was run with."""
    cmd = manifest.get("command")
    if not cmd:
        return ["_The command line was not recorded in manifest.json._", ""]
    later = [c for c in manifest.get("resumed_by") or [] if isinstance(c, str) and c]
    if not later:  # without its --out, pasted as it stands it measures again into a new run directory
        return [f"```sh\n{without_out(cmd)}\n```", ""]
    return [f"The run was started, then resumed {len(later)} time{'s' if len(later) > 1 else ''}; its rows come "
            "from all of these commands, in this order:", "", "```sh\n" + "\n".join([cmd, *later]) + "\n```", ""]


def render_report(df: pd.DataFrame, manifest: dict, run_name: str, plot_dir: Path | None = None,
                  sim_df: pd.DataFrame | None = None, sim_name: str = "",
                  studies: tuple[StudyReport, ...] = ()) -> str:
    """The report's markdown for a results frame and its manifest.

    Args: df: results rows (``load_run``); manifest: manifest dict (missing keys are fine);
    run_name: heading; plot_dir: where charts live (only existing PNGs are embedded; None: embed all);
    sim_df / sim_name: a simulated run's rows and name for the "Simulated vs real" section (without one,
    the section appears when ``df`` itself holds both simulated and torchrun rows); studies: the optional studies'
    sections and charts (:class:`~cpbench.report.study.StudyReport`, ``studies.study_reports()``).
    """
    d = prepare(df)
    view = cells(d)
    layers = sorted({int(x) for x in d["num_layers"].dropna()})
    cpu = on_cpu(manifest)
    parts = [f"# cpbench: fused vs two-call zigzag CP prefill attention — `{run_name}`", "", "## Summary", ""]
    # a CPU report says first that it makes no speedup claim; a GPU report opens with the per-backend answer
    parts += [CPU_NOTE, ""] if cpu else backend_answer(view)
    latency = ("Latency is one whole forward (all " + (f"{'/'.join(map(str, layers))} " if layers else "")
               + "attention layers), median of the timed samples, on the **critical path**: the slowest rank of "
               "each mode, since every CP rank waits for the slowest.")
    parts += [latency if cpu else  # a CPU report defines no speedup: it makes no claim with one
              latency + " " + READING_GUIDE.format(band=f"{TIE_BAND:.0%}"), ""]
    counts = [(m, b, kernel_counts(rows)) for m, b, _, rows in groups(d) if len(rows)]
    unit = "calls" if cpu else "kernels"
    pair = "mode" in d and set(MODES) <= set(d["mode"])  # fused against two-call: a speedup to summarise
    parts += ((ran_lines(d) + reference_check_lines(d)) if cpu else summary_lines(view) if pair else ran_lines(d))
    for st in studies:  # a study's lines in the summary (the breakable forward's section)
        parts += st.summary(d, view, cpu)
    parts += kernel_lines(counts, unit) + merge_lines(d)
    rule = run_rule(manifest)
    parts += [""] + (workload_sections(view, d, rule) if not cpu else cp_share_lines(view, rule) + [""])  # no speedups on CPU
    for st in studies:  # after the summary's bullets, so that none falls under a study's heading
        parts += st.section(d, view, cpu)
    parts += ["## Environment", "", environment_table(manifest, cpu), "", "## Reproduce", ""]
    parts += reproduce_lines(manifest)
    parts += ["## Results per cp size", "",
              "Latencies in ms (slowest rank per mode, CPU: a functional check)." if cpu else
              "Latencies in ms (slowest rank per mode); slowest rank = rank id on the critical path; "
              "imbalance = slowest / fastest rank.", ""]
    for heading, table in cell_tables(view, cpu):
        parts += [f"### {heading}", "", table, ""]
    if view.empty:
        parts += ["_The run measured cp-native only: its latencies are in \"Three points on one kernel family\" "
                  "above._" if "mode" in d and (d["mode"] == Mode.CP_NATIVE).any() else "_No result rows._", ""]
    parts += precision_section(d, manifest, cpu)
    parts += real_cp_section(d, manifest, cpu)
    sim = _simulated(d, sim_df)
    if sim is not None:
        parts += sim_vs_real_section(d, sim, sim_name or run_name, plot_dir)
    parts += resources_section(d, manifest, cpu)
    parts += (["## Attention calls per forward", "", "Attention calls of the backend per forward (a CPU "
               "runs no GPU kernels), eager timing.", ""] if cpu else
              ["## Attention kernels per forward", "",
               "GPU kernel executions classified as attention (torch backend: calls), eager timing.", ""])
    why = next((w for _, _, _, rows in groups(d) if (w := counts_missing(rows, calls=cpu))), "")
    parts += [kernel_table(counts, why, "call" if cpu else "kernel"), "", "## Charts", ""]
    for stem, model, backend, caption in chart_stems(d, cpu, studies):
        stem = stored_stem(plot_dir, stem, model, backend)
        if plot_dir is None or (plot_dir / f"{stem}.png").exists():
            parts += [f"**{stem}** — {caption}", "", f"![{stem}](plots/{stem}.png)", ""]
    parts += [f"**{stem}** — not drawn: {why}.\n" for stem, why in omitted_charts(d, cpu, studies)]
    missing = missing_cells(d, manifest)
    ran = notes(d)
    if missing and ran == [all_ran(set(d["mode"]))]:
        ran = []
    parts += ["## Notes", ""] + missing + ran + [""]
    return "\n".join(parts)


def stored_stem(plot_dir: Path | None, stem: str, model: str, backend: str) -> str:
    """The file stem under which ``plot_dir`` holds chart ``stem`` of (``model``, ``backend``): ``stem``, or, when only
    a chart drawn before schema 3 is there, the stem under the backend's old name (``..._gpt-oss-120b_fa3`` for
    ``flashinfer-fa3``, :data:`~cpbench.results.schema.V3_BACKENDS`)."""
    old = next((o for o, new in V3_BACKENDS.items() if new == backend), None)
    tail, was = (f"_{model}_{b}".replace("/", "-").replace(" ", "-") for b in (backend, old))  # as data.groups
    if plot_dir is None or old is None or not stem.endswith(tail) or (plot_dir / f"{stem}.png").exists():
        return stem
    before = stem[: -len(tail)] + was
    return before if (plot_dir / f"{before}.png").exists() else stem


def _simulated(d: pd.DataFrame, sim_df: pd.DataFrame | None) -> pd.DataFrame | None:
    """The simulated rows to compare the torchrun rows of ``d`` with: ``sim_df`` (prepared) when given,
    else ``d``'s own simulated rows when it holds both launches, else None (no section)."""
    if sim_df is not None:
        return prepare(sim_df)
    launches = set(d["launch"]) if len(d) else set()
    return d if {"simulated", "torchrun"} <= launches else None


def write_report(run_dir: str | Path, replot: bool = False, simulated: str | Path | None = None,
                 charts: bool = True, studies: tuple[StudyReport, ...] = (), chart_workers: int | None = 1) -> Path:
    """Write ``run_dir/report.md`` (and the charts into ``run_dir/plots/`` if any is missing, or always
    with ``replot``). Returns the report path.

    ``simulated``: a simulated run directory to compare this run's torchrun rows with (adds the
    "Simulated vs real critical path" section and ``plots/sim_vs_real.{png,svg}``).
    ``charts``: False writes report.md only: no chart is drawn (``replot`` is ignored) and the report embeds
    only the charts already in ``plots/``; the text is otherwise the same (drawing the charts is most of
    a report's time). ``studies``: the optional studies' sections and charts (``studies.study_reports()``).
    ``chart_workers``: processes that draw the charts (``charts.render_frame``'s ``workers``).
    Raises: CpbenchInputError (from ``load_run``): missing directory, no results, other schema version.
    """
    from cpbench.report.gather import sim_vs_real_chart

    run = Path(run_dir)
    df, manifest = load_run(run)
    sim_df = load_run(simulated)[0] if simulated is not None else None
    if sim_df is not None:
        check_simulated_pair(df, sim_df, run, Path(simulated))
    plot_dir = RunDir(run).plots
    cpu = on_cpu(manifest)
    with one_view():  # the rows are prepared and their critical path computed once for charts and text
        stems = chart_stems(prepare(df), cpu, studies)
        drawn = [plot_dir / f"{stored_stem(plot_dir, *s[:3])}.png" for s in stems]  # a run's old names included
        if charts and (replot or any(not p.exists() for p in drawn)):
            render_frame(df, plot_dir, cpu=cpu, device=device_name(manifest), studies=studies, workers=chart_workers)
        d = prepare(df)
        sim = _simulated(d, sim_df)
        if charts and sim is not None:
            sim_vs_real_chart(d, sim, plot_dir, device=device_name(manifest))
        sim_name = Path(simulated).resolve().name if simulated is not None else ""
        path = RunDir(run).report
        path.write_text(as_utf8(render_report(df, manifest, run.resolve().name, plot_dir, sim_df=sim_df,
                                              sim_name=sim_name, studies=studies)), encoding="utf-8")
    return path


def check_simulated_pair(df: pd.DataFrame, sim_df: pd.DataFrame, run: Path, simulated: Path) -> None:
    """Raise CpbenchInputError unless ``run`` holds torchrun rows and ``simulated`` (another directory)
    holds simulated rows; warn (CpbenchWarning) when no cell of the two matches."""
    if run.resolve() == simulated.resolve():
        raise CpbenchInputError(f"--simulated {str(simulated)!r} is the run itself: give the simulated twin's "
                                "directory (the same cells swept without --launch torchrun)")
    d, sim = prepare(df), prepare(sim_df)
    if not (d["launch"] == "torchrun").any():
        raise CpbenchInputError(f"{str(run)!r} holds no torchrun rows, so there is no real critical path to set "
                                "against a simulated one: --simulated is for a --launch torchrun run")
    if not (sim["launch"] == "simulated").any():
        raise CpbenchInputError(f"--simulated {str(simulated)!r} holds no simulated rows (it was measured with "
                                "--launch torchrun): give a run swept without --launch")
    if sim_vs_real(d, sim).empty:
        warnings.warn(f"no cell of {simulated} matches a cell of {run} (model, backend, dtype, timing, cp, bs, "
                      "tokens, prefix): the simulated-vs-real table is empty", CpbenchWarning, stacklevel=2)
