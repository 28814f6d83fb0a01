"""Compare two run directories row by row: NEW / BASE latency ratio, bootstrap CI, verdict, gate, exit code.

Rows match on ``schema.KEY_COLUMNS`` (model, backend, dtype, launch, world_size, gather, timing, cp_size,
bs, max_extend_len, prefix_len, extend_lens, rank, mode) and are compared when both are ``ok`` with a finite,
positive median latency (anything else is "not comparable", never a tie). pandas, numpy and scipy only
(no torch), so it runs on a laptop. The cells' fused-vs-two-call speedups of the two runs are compared by
:mod:`cpbench.results.compare_speedup`.

Rule (``fail_above`` default 0.05):
  ratio = NEW median / BASE median (µs); CI = 95% percentile bootstrap of the ratio of medians
  (``scipy.stats.bootstrap``), resampling each run's raw samples independently (``n_boot`` resamples,
  fixed seed per row).
  * verdict: :func:`cpbench.results.verdicts.ratio_verdict`, the one tie rule of every cpbench verdict
    (faster / slower when the CI lies below / above 1, tie when it contains 1; without a CI ±TIE_BAND).
  * regression: ratio > 1 + fail_above, the CI lies entirely above 1, and both rows hold at least
    ``min_samples`` timed samples (default ``verdicts.MIN_SAMPLES``): with fewer, the bootstrap CI is too narrow a guide and
    the row is reported but not gated. The CI covers noise within each run only; noise between runs
    (another process, clocks, a CPU machine) is not in it, so gate on a quiet GPU.
  * lost: a row ``ok`` in BASE that is not ok in NEW (unsupported, error, oom, mismatch, ineligible,
    no usable latency) or missing from NEW.
  * skipped in both: a row ``skipped`` (over --max-prefill-tokens) in BASE and NEW is not comparable but no
    failure (``CompareResult.skipped_both``); ok in BASE and skipped in NEW, it is lost.
  Exit code 1 (the gate fails) on any regression, and on any lost row unless ``allow_missing``. A CPU run
  (either manifest, ``verdicts.on_cpu``) is a functional check: no row is a regression or an ungated slowdown
  (its latencies are shown, never judged against the threshold), its correctness is gated (a row ok in BASE that
  fails or goes missing in NEW still fails the gate).
  Without raw samples the CI falls back to [new_ci_low / base_ci_high, new_ci_high / base_ci_low]
  from the rows' own median CIs; with neither, the CI is unknown and the tie band decides.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cpbench.domain.modes import Status
from cpbench.results.compare_speedup import speedup_frame
from cpbench.results.critical_path import flag
from cpbench.results.keys import canon, numeric_first
from cpbench.results.uncertainty import percentile_interval
from cpbench.results.schema import CELL_COLUMNS, KEY_COLUMNS, RUN_COLUMNS
from cpbench.results.store import load_run
from cpbench.results.verdicts import MIN_SAMPLES, on_cpu, ratio_verdict
from cpbench.errors import CpbenchInputError

MISSING = "missing"
FAILED = (Status.MISMATCH, Status.ERROR)  # NEW statuses that fail the gate whatever --allow-missing says
"""``new_status`` of a lost row that NEW does not hold at all."""
SKIPPED = Status.SKIPPED  # the status of a cell over --max-prefill-tokens (runner.over_token_budget)


@dataclass
class CompareResult:
    """Outcome of a comparison.

    Attributes:
        table: one row per matched ok/ok key: the key columns, ``base_us``, ``new_us``, ``ratio``,
            ``ci_low``, ``ci_high``, ``verdict``, ``regression`` (bool) and ``ungated`` (bool: slower
            beyond ``fail_above`` with the CI above 1, but with fewer than ``min_samples`` samples).
        only_base / only_new: key columns (+ ``status``) of rows present in one run only.
        not_comparable: keys present in both where either is not ok (``base_status``, ``new_status``,
            ``new_reason``); :attr:`skipped_both` is its part skipped in both runs.
        lost: key columns, ``base_status`` (ok), ``new_status`` (a status, ``no latency`` or
            ``missing``) and ``new_reason`` of rows ok in BASE that NEW did not measure.
        fail_above: the regression threshold (fraction, e.g. 0.05); min_samples: the sample floor;
        allow_missing: lost rows do not fail the gate.
        speedups: per cell, both runs' critical-path speedups, intervals and verdicts
            (:func:`cpbench.results.compare_speedup.speedup_frame`).
        cpu: either run is on a CPU (``verdicts.on_cpu``): a functional check, so no row is a regression (the
            table's ``regression`` and ``ungated`` are False); lost rows still fail the gate.
    """

    table: pd.DataFrame
    only_base: pd.DataFrame
    only_new: pd.DataFrame
    not_comparable: pd.DataFrame
    fail_above: float
    min_samples: int = MIN_SAMPLES
    lost: pd.DataFrame | None = None
    allow_missing: bool = False
    speedups: pd.DataFrame | None = None
    cpu: bool = False

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["regression"]] if len(self.table) else self.table

    @property
    def skipped_both(self) -> pd.DataFrame:
        """The ``not_comparable`` rows skipped in both runs (over --max-prefill-tokens): not a failure."""
        nc = self.not_comparable
        return nc[(nc["base_status"] == SKIPPED) & (nc["new_status"] == SKIPPED)]

    def latency_flags(self) -> list[str]:
        """The latency rule's line (rows slower by more than ``fail_above`` with the CI above 1), [] if none (always
        on a CPU run, which has no regression)."""
        if not len(self.regressions):
            return []
        return [f"{len(self.regressions)} row(s) slower by more than {self.fail_above:.1%} with the 95% CI above 1"]

    def gate_reasons(self) -> list[str]:
        """Why the gate fails, one line per kind (empty: it passes): regressions (none on a CPU run) and
        rows ok in BASE lost in NEW."""
        out = self.latency_flags()
        lost = self.lost if self.lost is not None else pd.DataFrame()
        failed = lost[lost["new_status"].isin(FAILED)] if len(lost) else lost
        gone = lost[~lost["new_status"].isin(FAILED)] if len(lost) else lost

        def kinds(df: pd.DataFrame) -> str:
            return ", ".join(f"{n} {st}" for st, n in sorted(df["new_status"].value_counts().items()))
        if len(failed):  # a failed check or a crash is never a missing cell
            out.append(f"{len(failed)} row(s) ok in base failed in new ({kinds(failed)}): a correctness mismatch "
                       "or an error fails the gate even with --allow-missing")
        if len(gone) and not self.allow_missing:
            out.append(f"{len(gone)} row(s) ok in base were not measured in new ({kinds(gone)}); "
                       "--allow-missing gates on latency only")
        return out

    @property
    def exit_code(self) -> int:
        """1 when the gate fails (a regression on a GPU run, or a lost row: a failed one always, a missing
        one without ``allow_missing``), else 0."""
        return 1 if self.gate_reasons() else 0


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    d = df.copy()
    for c in KEY_COLUMNS:
        if c not in d.columns:
            d[c] = None
    if "status" not in d.columns:
        d["status"] = Status.OK.value
    lat = pd.to_numeric(d.get("latency_us_median", pd.Series(math.nan, index=d.index)), errors="coerce")
    usable = np.isfinite(lat.to_numpy(float)) & (lat.to_numpy(float) > 0)
    d.loc[(d["status"] == Status.OK) & ~usable, "status"] = "no latency"  # non-finite, zero or negative median
    if "reason" not in d.columns:
        d["reason"] = ""
    d.loc[(d["status"] == "no latency"), "reason"] = [f"median latency {v} µs is not a latency"
                                                      for v in lat[d["status"] == "no latency"]]
    d["_key"] = ["\x1f".join(t) for t in zip(*[d[c].map(canon) for c in KEY_COLUMNS])]
    return d.drop_duplicates("_key", keep="last").set_index("_key")


def samples_of(v) -> np.ndarray:
    """Raw samples (µs) from a list, array or JSON string; finite positive values only."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return np.empty(0)
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else []
        except json.JSONDecodeError:
            return np.empty(0)
    a = np.asarray(list(v), dtype=float)
    return a[np.isfinite(a) & (a > 0)]


def _median_ratio(base: np.ndarray, new: np.ndarray, axis: int = -1) -> np.ndarray:
    """median(new) / median(base) along ``axis`` (vectorised over bootstrap resamples)."""
    return np.median(new, axis=axis) / np.median(base, axis=axis)


def ratio_ci(base: np.ndarray, new: np.ndarray, n_boot: int = 2000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap CI of median(new) / median(base) (``scipy.stats.bootstrap`` through
    :func:`cpbench.results.uncertainty.percentile_interval`, the two sample sets resampled independently with
    replacement). Needs >= 2 samples on each side, else ``(nan, nan)``. Deterministic for a seed
    (``numpy.random.default_rng(seed)``)."""
    if len(base) < 2 or len(new) < 2:
        return math.nan, math.nan
    batch = max(1, 4_000_000 // max(len(base), len(new)))  # bound memory: resamples per vectorised call
    return percentile_interval((base, new), _median_ratio, what="median(new) / median(base)", n_resamples=n_boot,
                               seed=seed, confidence=level, batch=batch)


def _median(row: pd.Series, samples: np.ndarray) -> float:
    m = pd.to_numeric(pd.Series([row.get("latency_us_median")]), errors="coerce").iloc[0]
    return float(m) if math.isfinite(m) and m > 0 else float(np.median(samples)) if len(samples) else math.nan


def _fallback_ci(b: pd.Series, n: pd.Series) -> tuple[float, float]:
    f = lambda r, c: pd.to_numeric(pd.Series([r.get(c)]), errors="coerce").iloc[0]
    bl, bh = f(b, "latency_us_ci_low"), f(b, "latency_us_ci_high")
    nl, nh = f(n, "latency_us_ci_low"), f(n, "latency_us_ci_high")
    if all(math.isfinite(x) and x > 0 for x in (bl, bh, nl, nh)):
        return nl / bh, nh / bl
    return math.nan, math.nan


def _n_samples(row: pd.Series, samples: np.ndarray) -> int:
    if len(samples):
        return len(samples)
    n = pd.to_numeric(pd.Series([row.get("n_samples")]), errors="coerce").iloc[0]
    return int(n) if math.isfinite(n) else 0


def compare_frames(base: pd.DataFrame, new: pd.DataFrame, fail_above: float = 0.05, n_boot: int = 2000,
                   seed: int = 0, min_samples: int = MIN_SAMPLES, allow_missing: bool = False,
                   cpu: bool = False) -> CompareResult:
    """Compare two results frames (see the module docstring for the rule).

    Args: fail_above: fraction >= 0 (0.05 = 5%); n_boot: bootstrap resamples; seed: base seed;
        min_samples: timed samples both rows need before a slowdown can count as a regression;
        allow_missing: rows ok in BASE but not measured in NEW do not fail the gate;
        cpu: either run is on a CPU (a functional check): no row is a regression or an ungated slowdown.
    Raises: CpbenchInputError for a negative or non-finite fail_above, or min_samples < 2.
    """
    if not (math.isfinite(fail_above) and fail_above >= 0):
        raise CpbenchInputError(f"--fail-above must be a fraction >= 0 (e.g. 0.05), got {fail_above}")
    if min_samples < 2:
        raise CpbenchInputError(f"--min-samples must be >= 2 (a CI needs two samples), got {min_samples}")
    b, n = _keyed(base), _keyed(new)
    keys = list(KEY_COLUMNS)
    both = b.index.intersection(n.index)
    ok = [k for k in both if b.at[k, "status"] == Status.OK and n.at[k, "status"] == Status.OK]
    recs = []
    for k in sorted(ok):
        br, nr = b.loc[k], n.loc[k]
        bs, ns = samples_of(br.get("samples_us")), samples_of(nr.get("samples_us"))
        bm, nm = _median(br, bs), _median(nr, ns)
        ratio = nm / bm
        lo, hi = ratio_ci(bs, ns, n_boot, seed ^ zlib.crc32(k.encode()))
        if not math.isfinite(lo):
            lo, hi = _fallback_ci(br, nr)
        enough = min(_n_samples(br, bs), _n_samples(nr, ns)) >= min_samples
        slow = ratio > 1 + fail_above and (not math.isfinite(lo) or lo > 1.0) and not cpu
        recs.append({**{c: br[c] for c in keys}, "base_us": bm, "new_us": nm, "ratio": ratio, "ci_low": lo,
                     "ci_high": hi, "verdict": ratio_verdict(ratio, lo, hi), "regression": bool(slow and enough),
                     "ungated": bool(slow and not enough),
                     "host_bound": flag(br.get("host_bound")) or flag(nr.get("host_bound"))})
    table = pd.DataFrame(recs, columns=keys + ["base_us", "new_us", "ratio", "ci_low", "ci_high", "verdict",
                                               "regression", "ungated", "host_bound"])
    table = table.sort_values(keys, key=numeric_first, kind="stable").reset_index(drop=True) if recs else table
    bad = [k for k in sorted(both) if k not in set(ok)]
    nc = pd.DataFrame([{**{c: b.at[k, c] for c in keys}, "base_status": b.at[k, "status"],
                        "new_status": n.at[k, "status"], "new_reason": str(n.at[k, "reason"] or "")} for k in bad],
                      columns=keys + ["base_status", "new_status", "new_reason"])
    only = lambda d, other: d.loc[sorted(d.index.difference(other.index)), keys + ["status"]].reset_index(drop=True)
    only_base = only(b, n)
    lost = pd.concat([nc[nc["base_status"] == Status.OK],
                      only_base[only_base["status"] == Status.OK].rename(columns={"status": "base_status"}).assign(
                          new_status=MISSING, new_reason="not in the new run")], ignore_index=True)
    return CompareResult(table, only_base, only(n, b), nc, fail_above, min_samples, lost, allow_missing,
                         speedup_frame(base, new), cpu)


def compare_runs(base_dir: str | Path, new_dir: str | Path, fail_above: float = 0.05, n_boot: int = 2000,
                 seed: int = 0, min_samples: int = MIN_SAMPLES,
                 allow_missing: bool = False) -> tuple[CompareResult, dict, dict]:
    """Load two run directories and compare them: ``(result, base_manifest, new_manifest)``.

    Raises: CpbenchInputError: a missing run directory, one without results, or another schema version.
    """
    base_df, base_man = load_run(base_dir)
    new_df, new_man = load_run(new_dir)
    check_same_model(base_man, new_man)
    res = compare_frames(base_df, new_df, fail_above, n_boot, seed, min_samples, allow_missing,
                         cpu=on_cpu(base_man) or on_cpu(new_man))
    return res, base_man, new_man


def check_same_model(base_man: dict, new_man: dict) -> None:
    """Refuse two runs whose manifests record different model shapes (layers, q heads, kv heads, head_dim,
    windowed layers, sinks) under the same model name: their rows would pair though they measure different
    attention. Runs of differently named models do not pair anyway.

    Raises:
        CpbenchInputError: same name, different shape.
    """
    from cpbench.domain.models import shape_difference

    a, b = ((m.get("config") or {}).get("model") for m in (base_man, new_man))
    if not (isinstance(a, dict) and isinstance(b, dict)) or a.get("name") != b.get("name"):
        return
    diff = shape_difference(a, b)
    if diff:
        raise CpbenchInputError(f"the two runs measure different models under the same name {a.get('name')!r} "
                                f"({diff}): compare runs of the same model shape")


def cells_of(rows: pd.DataFrame) -> list[str]:
    """Distinct cells (no rank/mode) of key rows, as 'model · backend · timing · cp 4 · bs 1 · extend 8192'."""
    out = []
    if rows.empty:
        return out
    for _, r in rows.drop_duplicates(list(CELL_COLUMNS)).iterrows():
        s = (f"{r['model']} · {r['backend']} · {r['timing']} · cp {canon(r['cp_size'])} · bs {canon(r['bs'])}"
             f" · extend {canon(r['max_extend_len'])}")
        pre = canon(r["prefix_len"])
        out.append(s + (f" + prefix {pre}" if pre not in ("", "0") else ""))
    return out


def _values(rows: pd.DataFrame, col: str) -> list[str]:
    vals = {canon(v) for v in rows.get(col, [])}
    return sorted(vals, key=lambda x: (0, float(x), x) if x.replace(".", "", 1).isdigit() else (1, 0.0, x))


def _listed(vals: list[str], most: int = 6) -> str:
    return ", ".join(vals[:most]) + (f", … ({len(vals)} values)" if len(vals) > most else "")


def run_difference(only_base: pd.DataFrame, only_new: pd.DataFrame) -> str:
    """What tells the unmatched rows of two runs apart, e.g. ``backend: torch in base, fa3 in new``: the
    run-wide key columns whose values differ, else the cell columns that do (extend_lens aside: it
    follows bs and max_extend_len); a fallback sentence when the key values are the same sets on both sides."""
    cell_cols = [c for c in CELL_COLUMNS[len(RUN_COLUMNS):] if c != "extend_lens"]
    for cols in (RUN_COLUMNS, cell_cols):
        parts = []
        for col in cols:
            a, c = _values(only_base, col), _values(only_new, col)
            if a and c and a != c:
                parts.append(f"{col}: {_listed(a)} in base, {_listed(c)} in new")
        if parts:
            return "; ".join(parts)
    if not len(only_base) or not len(only_new):
        side = "base" if len(only_base) else "new"
        return f"{max(len(only_base), len(only_new))} row(s) only in {side}"
    return "the unmatched rows differ only in the combination of their key values"
