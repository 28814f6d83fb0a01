"""Markdown for ``cpbench compare``: header (what was compared, the rule), regressions, every row."""

from __future__ import annotations

import math

import numpy as np

from cpbench.bench.compare import CompareResult, cells_of
from cpbench.bench.schema import CELL_COLUMNS
from cpbench.plots.tables import md_table, ms

MAX_LISTED = 40


def _pct(r: float) -> str:
    return f"{(r - 1) * 100:+.1f}%" if math.isfinite(r) else "—"


def _ci(lo: float, hi: float) -> str:
    return f"{lo:.3f}–{hi:.3f}" if math.isfinite(lo) and math.isfinite(hi) else "—"


def _env(man: dict) -> str:
    keys = (("git_commit", "commit "), ("gpu_name", ""), ("flashinfer", "flashinfer "), ("torch", "torch "))
    return ", ".join(f"{label}{man[k]}" for k, label in keys if man.get(k)) or "no manifest"


def _rows_table(t) -> str:
    single = {c: t[c].iloc[0] for c in ("model", "backend") if t[c].nunique() == 1}
    cols = [c for c in ("model", "backend") if c not in single]
    heads = cols + ["timing", "cp>", "bs>", "seq>", "prefix>", "rank>", "mode", "base ms>", "new ms>",
                    "new/base>", "change>", "95% CI>", "verdict"]
    rows = []
    for _, r in t.iterrows():
        v = r["verdict"] if r["verdict"] == "near-tie" else f"**{r['verdict']}**"
        v += " ⚠ regression" if r["regression"] else ""
        rows.append([r[c] for c in cols] + [r["timing"], r["cp_size"], r["bs"], r["seq_len"], r["prefix_len"],
                                            r["rank"], r["mode"], ms(r["base_us"]), ms(r["new_us"]),
                                            f"{r['ratio']:.3f}" if math.isfinite(r["ratio"]) else "—",
                                            _pct(r["ratio"]), _ci(r["ci_low"], r["ci_high"]), v])
    caption = ", ".join(f"{k} {v}" for k, v in single.items())
    return (f"_{caption}_\n\n" if caption else "") + md_table(heads, rows)


def _listing(lines: list[str]) -> list[str]:
    out = [f"- {s}" for s in lines[:MAX_LISTED]]
    if len(lines) > MAX_LISTED:
        out.append(f"- … and {len(lines) - MAX_LISTED} more")
    return out


def compare_markdown(res: CompareResult, base_name: str, new_name: str, base_man: dict | None = None,
                     new_man: dict | None = None) -> str:
    """The comparison as GitHub markdown (header, rule, counts, regressions, full table, unmatched cells)."""
    base_man, new_man = base_man or {}, new_man or {}
    t = res.table
    counts = {v: int((t["verdict"] == v).sum()) for v in ("faster", "slower", "near-tie")}
    ratios = t["ratio"].to_numpy(float)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    parts = [f"# cpbench compare: `{new_name}` vs `{base_name}`", "",
             f"- base: `{base_name}` ({_env(base_man)})", f"- new: `{new_name}` ({_env(new_man)})"]
    if base_man.get("gpu_name") and new_man.get("gpu_name") and base_man["gpu_name"] != new_man["gpu_name"]:
        parts.append(f"- ⚠ different GPUs ({base_man['gpu_name']} vs {new_man['gpu_name']}): ratios compare machines, "
                     "not code.")
    if "cpu" in (base_man.get("device"), new_man.get("device")):
        parts.append("- ⚠ CPU run: CPU timings vary far more between runs than within one (the CI sees only the "
                     "latter); treat verdicts as indicative and gate on a GPU.")
    parts += ["", f"Rule: ratio = new / base median latency (< 1: new is faster); 95% CI by bootstrap of the raw "
                  f"samples. **near-tie** when |ratio − 1| ≤ {res.band:.1%} or the CI contains 1; "
                  f"**regression** (exit 1) when ratio > {1 + res.fail_above:.3f}, the CI lies entirely "
                  f"above 1 and both rows hold ≥ {res.min_samples} samples.", ""]
    if len(t):
        geo = float(np.exp(np.log(ratios).mean())) if len(ratios) else math.nan
        parts.append(f"**{len(t)} rows compared: {counts['faster']} faster, {counts['slower']} slower, "
                     f"{counts['near-tie']} near-tie; geometric-mean ratio {geo:.3f} ({_pct(geo)}); "
                     f"{len(res.regressions)} regression(s) beyond +{res.fail_above:.1%}.**")
    else:
        parts.append("**No rows ran (status ok) in both runs: nothing to compare.**")
    if len(res.regressions):
        parts += ["", "## Regressions", "", _rows_table(res.regressions)]
    ungated = t[t["ungated"]] if len(t) else t
    if len(ungated):
        parts += ["", f"## Slower but not gated (< {res.min_samples} samples in a run)", "",
                  "Raise `--budget-ms` in both sweeps to gate these rows.", "", _rows_table(ungated)]
    if len(t):
        parts += ["", "## All rows", "", _rows_table(t)]
    if len(res.not_comparable):
        dedup = res.not_comparable.drop_duplicates(list(CELL_COLUMNS))
        lines = [f"{c}: base {r.base_status}, new {r.new_status}" for c, r in zip(cells_of(dedup), dedup.itertuples())]
        parts += ["", "## Not comparable (not ok in one run)", ""] + _listing(lines)
    for title, rows in (("Only in base", res.only_base), ("Only in new", res.only_new)):
        if len(rows):
            parts += ["", f"## {title} ({len(rows)} rows)", ""] + _listing(cells_of(rows))
    return "\n".join(parts) + "\n"
