"""Markdown for ``cpbench compare``: header (what was compared, the rule, the gate), the speedups of both
runs per cell (not for a CPU run, which makes no speedup claim: one line says so), regressions, rows lost in
NEW, every row, not-comparable and unmatched cells. A CPU run has no regression (``CompareResult.cpu``): no
regression label, count, section or advice, only each row's difference and the CPU note."""

from __future__ import annotations

import json
import math

import numpy as np

from cpbench.domain.modes import Status
from cpbench.results.compare import CompareResult, cells_of, run_difference
from cpbench.results.compare_speedup import agreement_line
from cpbench.results.critical_path import flag
from cpbench.results.schema import CELL_COLUMNS
from cpbench.results.verdicts import TIE_BAND, effect_text, inverse
from cpbench.report.data import on_cpu
from cpbench.report.tables import HOST_MARK, md_table, ms, plural
from cpbench.report.units import EFFECT_UNIT
from cpbench.results.policy import host_bound_text

MAX_LISTED = 40
CHANGE_UNIT = "new saves, % of base time"  # compare's unit: the one notation, new against base


def _change(ratio: float, lo: float = math.nan, hi: float = math.nan) -> str:
    """A row's ``new / base`` latency ratio and its interval in the one notation: the share of the base time the
    new run saves (+) or costs (−), ``−0.3 % [−1.0, +0.4]`` (:func:`cpbench.results.verdicts.effect_text`)."""
    return effect_text(inverse(ratio), inverse(hi), inverse(lo))


def _env(man: dict) -> str:
    keys = (("git_commit", "commit "), ("code_sha256", "code "), ("gpu_name", ""), ("flashinfer", "flashinfer "),
            ("torch", "torch "))
    short = {"code_sha256": 12}
    return ", ".join(f"{label}{str(man[k])[:short.get(k, 80)]}" for k, label in keys if man.get(k)) or "no manifest"


def _rows_table(t) -> str:
    single = {c: t[c].iloc[0] for c in ("model", "backend") if t[c].nunique() == 1}
    cols = [c for c in ("model", "backend") if c not in single]
    heads = cols + ["timing", "cp>", "bs>", "extend>", "prefix>", "rank>", "mode", "base ms>", "new ms>",
                    f"{CHANGE_UNIT} [95% CI]>", "verdict"]
    rows = []
    for _, r in t.iterrows():
        v = r["verdict"] if r["verdict"] == "tie" else f"**{r['verdict']}**"
        v += " ⚠ regression" if r["regression"] else ""
        v += " (host-bound: the launching CPU's time)" if flag(r.get("host_bound")) else ""
        rows.append([r[c] for c in cols] + [r["timing"], r["cp_size"], r["bs"], r["max_extend_len"], r["prefix_len"],
                                            r["rank"], r["mode"], ms(r["base_us"]), ms(r["new_us"]),
                                            _change(r["ratio"], r["ci_low"], r["ci_high"]), v])
    caption = ", ".join(f"{k} {v}" for k, v in single.items())
    return (f"_{caption}_\n\n" if caption else "") + md_table(heads, rows)


def _listing(lines: list[str]) -> list[str]:
    out = [f"- {s}" for s in lines[:MAX_LISTED]]
    if len(lines) > MAX_LISTED:
        out.append(f"- … and {len(lines) - MAX_LISTED} more")
    return out


def _speedup(sp: float, lo: float, hi: float) -> str:
    """A run's fused effect (the share of the two-call time fused saves) with its interval (:func:`effect_text`)."""
    return effect_text(sp, lo, hi)


def _speedups_table(f) -> str:
    single = {c: f[c].iloc[0] for c in ("model", "backend") if f[c].nunique() == 1}
    cols = [c for c in ("model", "backend") if c not in single]
    heads = cols + ["timing", "cp>", "bs>", "extend>", "prefix>", f"base: {EFFECT_UNIT} [95% CI]>", "base verdict",
                    f"new: {EFFECT_UNIT} [95% CI]>", "new verdict", "agree", "overlap"]
    rows = []
    for _, r in f.iterrows():
        agree = "—" if r["agree"] is None else "yes" if r["agree"] else "**no**"
        one_band = sum(math.isfinite(r[f"{side}_ci_low"]) and math.isfinite(r[f"{side}_ci_high"])
                       for side in ("base", "new")) == 1
        if r["agree"] is not None and one_band:  # one verdict from an interval, the other from the ±2 % band
            agree += " (one run has no interval)"
        overlap = "—" if r.get("overlap") is None else "yes" if r["overlap"] else "**no**"
        rows.append([r[c] for c in cols] + [r["timing"], r["cp_size"], r["bs"], r["max_extend_len"], r["prefix_len"],
                                            _speedup(r["base_speedup"], r["base_ci_low"], r["base_ci_high"])
                                            + _hb(r, "base"),
                                            r["base_verdict"] if r["base_status"] == Status.OK else r["base_status"],
                                            _speedup(r["new_speedup"], r["new_ci_low"], r["new_ci_high"])
                                            + _hb(r, "new"),
                                            r["new_verdict"] if r["new_status"] == Status.OK else r["new_status"], agree,
                                            overlap])
    caption = ", ".join(f"{k} {v}" for k, v in single.items())
    marked = any(_hb(r, side) for _, r in f.iterrows() for side in ("base", "new"))
    note = (f"\n\n{HOST_MARK} host-bound in that run: its eager latency exceeds {host_bound_text()} the GPU busy time, so the effect "
            "measures how fast the CPU launches" if marked else "")
    return (f"_{caption}_\n\n" if caption else "") + md_table(heads, rows) + note


# sweep options that change what every row means (its page tables or its cells), with their defaults
ROW_MEANING = {"swa_pool": False, "context_len": None, "prefix_hit": None, "cp_min_extend": "pr", "cp_min_tokens": 0,
               "ep": None, "layer_rest_us": None, "graph_buckets": []}


def _short(v) -> str:
    """A recorded option value for one line: ``none`` for None, at most 40 characters."""
    return "none" if v is None else str(v)[:40]


def _hb(r, side: str) -> str:
    """`` †`` when ``side``'s cell was host-bound (its eager speedup is the launching CPU's), else ''."""
    return f" {HOST_MARK}" if bool(r.get(f"{side}_host_bound", False)) else ""


def _lost_lines(lost) -> list[str]:
    dedup = lost.drop_duplicates(list(CELL_COLUMNS) + ["new_status"])
    return [f"{c}: base ok, new {r.new_status}" + (f" ({r.new_reason})" if r.new_reason else "")
            for c, r in zip([cells_of(dedup.iloc[[i]])[0] for i in range(len(dedup))], dedup.itertuples())]


def _gate_line(reasons: list[str], cpu: bool) -> str:
    """The gate's verdict: FAIL with its reasons, or pass. On a CPU run only correctness is gated: the line
    says the latencies were not."""
    verdict = ("**Gate: FAIL** (exit 1): " + "; ".join(reasons) + ".") if reasons else "**Gate: pass.**"
    if not cpu:
        return verdict
    return (verdict.replace("Gate:", "Correctness gate:") + " Latency gate not applied (CPU timings: a functional "
            "check, not a benchmark; gate latencies on a GPU).")


def compare_markdown(res: CompareResult, base_name: str, new_name: str, base_man: dict | None = None,
                     new_man: dict | None = None) -> str:
    """The comparison as GitHub markdown: header (BASE before NEW), gate verdict with its reasons, the
    rule, counts, the two runs' critical-path speedups per cell with their verdicts' agreement (when
    either run is on a CPU, ``data.on_cpu`` as in the report: one line saying why not), regressions, rows
    lost in NEW, every compared row, not-comparable cells (those skipped in both runs counted in one line,
    not listed) and unmatched cells (with the key that tells the runs apart)."""
    base_man, new_man = base_man or {}, new_man or {}
    cpu = on_cpu(base_man) or on_cpu(new_man)
    t = res.table
    counts = {v: int((t["verdict"] == v).sum()) for v in ("faster", "slower", "tie")}
    ratios = t["ratio"].to_numpy(float)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    reasons = res.gate_reasons()
    parts = [f"# cpbench compare: base `{base_name}` → new `{new_name}`", "",
             f"- base: `{base_name}` ({_env(base_man)})", f"- new: `{new_name}` ({_env(new_man)})"]
    if base_man.get("gpu_name") and new_man.get("gpu_name") and base_man["gpu_name"] != new_man["gpu_name"]:
        parts.append(f"- ⚠ different GPUs ({base_man['gpu_name']} vs {new_man['gpu_name']}): ratios compare machines, "
                     "not code.")
    for key, what in (("cpu_threads", "CPU threads"), ("max_prefill_tokens", "--max-prefill-tokens")):
        a = base_man.get(key, (base_man.get("config") or {}).get(key))
        b = new_man.get(key, (new_man.get("config") or {}).get(key))
        ints = all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2 ** 31 for x in (a, b))
        if ints and a != b:  # hand-edited values that are not counts are not compared
            parts.append(f"- ⚠ different {what} ({a} vs {b}): the runs were not measured alike.")
    for key, default in ROW_MEANING.items():  # a run made before an option existed ran with its default
        a, b = ((m.get("config") or {}).get(key, default) for m in (base_man, new_man))
        if base_man.get("config") and new_man.get("config") and json.dumps(a, default=str) != json.dumps(b, default=str):
            parts.append(f"- ⚠ different --{key.replace('_', '-')} ({_short(a)} vs {_short(b)}): the rows' page tables "
                         "or cells differ in meaning, not only in code.")
    if on_cpu(base_man) != on_cpu(new_man) and base_man and new_man:
        parts.append("- ⚠ one run is on a CPU and the other on a GPU: the ratios compare devices, not code.")
    if cpu:
        parts.append("- ⚠ CPU run: CPU timings vary far more between runs than within one (the CI sees only the "
                     "latter); treat verdicts as indicative and gate on a GPU.")
    parts += ["", _gate_line(reasons, res.cpu), ""]
    regression = ("" if res.cpu else  # a CPU run's latencies are shown, never judged against the threshold
                  f"**regression** when new costs more than {res.fail_above:.1%} of the base time (new / base > "
                  f"{1 + res.fail_above:.3f}), the CI lies entirely below 0 and both rows hold ≥ {res.min_samples} "
                  "samples; ")
    parts += [f"Rule: per row, the share of the base median latency the new run saves (+) or costs (−), "
              f"1 − new / base; 95% CI by bootstrap of the raw samples. **tie** when the CI contains 0 (without a "
              f"CI: within ±{TIE_BAND:.0%}); {regression}a row ok in base but not measured in new "
              "fails the gate" + (" (not with --allow-missing)" if res.allow_missing else "")
              + ", and one that is a mismatch or an error in new always does.", ""]
    if len(t):
        geo = float(np.exp(np.log(ratios).mean())) if len(ratios) else math.nan
        parts.append(f"**{len(t)} rows compared: {counts['faster']} faster, {counts['slower']} slower, "
                     f"{counts['tie']} tie; geometric mean {_change(geo)}"
                     + ("" if res.cpu else f"; {len(res.regressions)} regression(s) (new costs more than {res.fail_above:.1%})")
                     + ".**")
    else:
        parts.append("**No rows ran (status ok) in both runs: nothing to compare.**")
    sp = res.speedups
    if sp is not None and len(sp) and cpu:
        parts += ["", "Speedups (fused vs two-call) not compared: a CPU run makes no speedup claim (the torch "
                  "reference on a CPU is a correctness check; its timings move by tens of percent between runs)."]
    elif sp is not None and len(sp):
        parts += ["", "## Fused vs two-call in each run (critical path)", "",
                  f"Each run's share of the two-call time fused saves (+) or costs (−), with its 95 % interval; "
                  f"**{agreement_line(sp)}** "
                  "(verdicts: faster / slower / tie by interval; overlap: the two intervals share a value, so "
                  "neither run contradicts the other).", "", _speedups_table(sp)]
    if len(res.regressions):
        parts += ["", "## Regressions", "", _rows_table(res.regressions)]
    lost = res.lost if res.lost is not None else t.iloc[0:0]
    if len(lost):
        note = ("only mismatches and errors are gated (--allow-missing)" if res.allow_missing
                else "these fail the gate")
        parts += ["", f"## Lost in new ({len(lost)} rows ok in base; {note})", ""] + _listing(_lost_lines(lost))
    ungated = t[t["ungated"]] if len(t) else t
    if len(ungated):
        parts += ["", f"## Slower but not gated (< {res.min_samples} samples in a run)", "",
                  "Raise `--budget-ms` in both sweeps to gate these rows.", "", _rows_table(ungated)]
    if len(t):
        parts += ["", "## All rows", "", _rows_table(t)]
    skipped = res.skipped_both
    other = res.not_comparable[res.not_comparable["base_status"] != Status.OK].drop(index=skipped.index)
    if len(other):
        dedup = other.drop_duplicates(list(CELL_COLUMNS))
        lines = [f"{c}: base {r.base_status}, new {r.new_status}" for c, r in zip(cells_of(dedup), dedup.itertuples())]
        parts += ["", "## Not comparable (not ok in base)", ""] + _listing(lines)
    if len(skipped):
        parts += ["", f"{plural(len(cells_of(skipped)), 'cell')} skipped in both runs (over --max-prefill-tokens): "
                  "not compared, not a failure."]
    if len(res.only_base) and len(res.only_new):
        parts += ["", f"Unmatched rows differ in {run_difference(res.only_base, res.only_new)}."]
    for title, rows in (("Only in base", res.only_base), ("Only in new", res.only_new)):
        if len(rows):
            parts += ["", f"## {title} ({len(rows)} rows)", ""] + _listing(cells_of(rows))
    return "\n".join(parts) + "\n"
