"""Compare two run directories row by row: NEW / BASE latency ratio, bootstrap CI, verdict, exit code.

Rows match on ``schema.KEY_COLUMNS`` (model, backend, dtype, launch, world_size, gather, timing, cp_size,
bs, seq_len, prefix_len, extend_lens, rank, mode) and are compared when both are ``ok``. pandas, numpy and scipy only (no torch),
so it runs on a laptop.

Verdict rule (``band`` default 0.03, ``fail_above`` default 0.05):
  ratio = NEW median / BASE median (µs); CI = 95% percentile bootstrap of the ratio of medians
  (``scipy.stats.bootstrap``), resampling each run's raw samples independently (``n_boot`` resamples,
  fixed seed per row).
  * near-tie: |ratio - 1| <= band, or the CI contains 1 (the difference is within noise);
  * faster:   otherwise, ratio < 1;   * slower: otherwise, ratio > 1.
  * regression (exit code 1): ratio > 1 + fail_above, the CI lies entirely above 1, and both rows hold
    at least ``min_samples`` timed samples (default 10): with fewer, the bootstrap CI is too narrow a
    guide and the row is reported but not gated. The CI covers noise within each run only; noise
    between runs (another process, clocks, a CPU machine) is not in it, so gate on a quiet GPU.
  Without raw samples the CI falls back to [new_ci_low / base_ci_high, new_ci_high / base_ci_low]
  from the rows' own median CIs; with neither, the CI is unknown and the band alone decides.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from cpbench.bench.schema import CELL_COLUMNS, KEY_COLUMNS
from cpbench.bench.store import load_run
from cpbench.errors import CpbenchInputError

VERDICTS = ("faster", "slower", "near-tie")


@dataclass
class CompareResult:
    """Outcome of a comparison.

    Attributes:
        table: one row per matched ok/ok key: the key columns, ``base_us``, ``new_us``, ``ratio``,
            ``ci_low``, ``ci_high``, ``verdict``, ``regression`` (bool) and ``ungated`` (bool: slower
            beyond ``fail_above`` with the CI above 1, but with fewer than ``min_samples`` samples).
        only_base / only_new: key columns (+ ``status``) of rows present in one run only.
        not_comparable: keys present in both where either is not ok (``base_status``, ``new_status``).
        band, fail_above: the thresholds used (fractions, e.g. 0.03); min_samples: the sample floor.
    """

    table: pd.DataFrame
    only_base: pd.DataFrame
    only_new: pd.DataFrame
    not_comparable: pd.DataFrame
    band: float
    fail_above: float
    min_samples: int = 10

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["regression"]] if len(self.table) else self.table

    @property
    def exit_code(self) -> int:
        """1 when any row regressed beyond ``fail_above`` (see the module docstring), else 0."""
        return 1 if len(self.regressions) else 0


def _canon(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (list, tuple, np.ndarray)):
        return ",".join(_canon(x) for x in v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    d = df.copy()
    for c in KEY_COLUMNS:
        if c not in d.columns:
            d[c] = None
    if "status" not in d.columns:
        d["status"] = "ok"
    lat = pd.to_numeric(d.get("latency_us_median", pd.Series(math.nan, index=d.index)), errors="coerce")
    d.loc[(d["status"] == "ok") & ~(lat > 0), "status"] = "no latency"  # ok rows without a usable median
    d["_key"] = ["\x1f".join(t) for t in zip(*[d[c].map(_canon) for c in KEY_COLUMNS])]
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


# scipy >= 1.15 takes the generator as ``rng``; older releases (the floor is 1.10) as ``random_state``
_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def ratio_ci(base: np.ndarray, new: np.ndarray, n_boot: int = 2000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap CI of median(new) / median(base) (``scipy.stats.bootstrap``, the two sample
    sets resampled independently with replacement). Needs >= 2 samples on each side, else
    ``(nan, nan)``. Deterministic for a seed (``numpy.random.default_rng(seed)``)."""
    if len(base) < 2 or len(new) < 2:
        return math.nan, math.nan
    batch = max(1, 4_000_000 // max(len(base), len(new)))  # bound memory: resamples per vectorised call
    with warnings.catch_warnings():  # identical samples give a point interval; scipy warns it is degenerate
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap((np.asarray(base, float), np.asarray(new, float)), _median_ratio,
                              n_resamples=n_boot, batch=batch, vectorized=True, paired=False,
                              confidence_level=level, method="percentile",
                              **{_RNG_KW: np.random.default_rng(seed)})
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def verdict(ratio: float, lo: float, hi: float, band: float) -> str:
    """``near-tie`` if |ratio-1| <= band or lo <= 1 <= hi, else ``faster`` (ratio < 1) / ``slower``."""
    straddles = math.isfinite(lo) and math.isfinite(hi) and lo <= 1.0 <= hi
    if abs(ratio - 1.0) <= band or straddles:
        return "near-tie"
    return "faster" if ratio < 1.0 else "slower"


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


def compare_frames(base: pd.DataFrame, new: pd.DataFrame, band: float = 0.03, fail_above: float = 0.05,
                   n_boot: int = 2000, seed: int = 0, min_samples: int = 10) -> CompareResult:
    """Compare two results frames (see the module docstring for the rule).

    Args: band, fail_above: fractions >= 0 (0.03 = 3%); n_boot: bootstrap resamples; seed: base seed;
        min_samples: timed samples both rows need before a slowdown can count as a regression.
    Raises: CpbenchInputError for a negative band/fail_above or min_samples < 2.
    """
    if band < 0 or fail_above < 0 or not (math.isfinite(band) and math.isfinite(fail_above)):
        raise CpbenchInputError(f"--band and --fail-above must be fractions >= 0 (e.g. 0.03), got {band}, {fail_above}")
    if min_samples < 2:
        raise CpbenchInputError(f"--min-samples must be >= 2 (a CI needs two samples), got {min_samples}")
    b, n = _keyed(base), _keyed(new)
    keys = list(KEY_COLUMNS)
    both = b.index.intersection(n.index)
    ok = [k for k in both if b.at[k, "status"] == "ok" and n.at[k, "status"] == "ok"]
    recs = []
    for k in sorted(ok):
        br, nr = b.loc[k], n.loc[k]
        bs, ns = samples_of(br.get("samples_us")), samples_of(nr.get("samples_us"))
        bm, nm = _median(br, bs), _median(nr, ns)
        ratio = nm / bm if bm > 0 and math.isfinite(nm) else math.nan
        lo, hi = ratio_ci(bs, ns, n_boot, seed ^ zlib.crc32(k.encode()))
        if not math.isfinite(lo):
            lo, hi = _fallback_ci(br, nr)
        v = verdict(ratio, lo, hi, band) if math.isfinite(ratio) else "near-tie"
        enough = min(_n_samples(br, bs), _n_samples(nr, ns)) >= min_samples
        slow = math.isfinite(ratio) and ratio > 1 + fail_above and (not math.isfinite(lo) or lo > 1.0)
        recs.append({**{c: br[c] for c in keys}, "base_us": bm, "new_us": nm, "ratio": ratio, "ci_low": lo,
                     "ci_high": hi, "verdict": v, "regression": bool(slow and enough),
                     "ungated": bool(slow and not enough)})
    table = pd.DataFrame(recs, columns=keys + ["base_us", "new_us", "ratio", "ci_low", "ci_high", "verdict",
                                               "regression", "ungated"])
    bad = [k for k in sorted(both) if k not in set(ok)]
    nc = pd.DataFrame([{**{c: b.at[k, c] for c in keys}, "base_status": b.at[k, "status"],
                        "new_status": n.at[k, "status"]} for k in bad], columns=keys + ["base_status", "new_status"])
    only = lambda d, other: d.loc[sorted(d.index.difference(other.index)), keys + ["status"]].reset_index(drop=True)
    return CompareResult(table, only(b, n), only(n, b), nc, band, fail_above, min_samples)


def compare_runs(base_dir: str | Path, new_dir: str | Path, band: float = 0.03, fail_above: float = 0.05,
                 n_boot: int = 2000, seed: int = 0, min_samples: int = 10) -> tuple[CompareResult, dict, dict]:
    """Load two run directories and compare them: ``(result, base_manifest, new_manifest)``.

    Raises: CpbenchInputError: a missing run directory, one without results, or another schema version.
    """
    base_df, base_man = load_run(base_dir)
    new_df, new_man = load_run(new_dir)
    return compare_frames(base_df, new_df, band, fail_above, n_boot, seed, min_samples), base_man, new_man


def cells_of(rows: pd.DataFrame) -> list[str]:
    """Distinct cells (no rank/mode) of key rows, as 'model · backend · timing · cp 4 · bs 1 · seq 8192'."""
    out = []
    if rows.empty:
        return out
    for _, r in rows.drop_duplicates(list(CELL_COLUMNS)).iterrows():
        s = (f"{r['model']} · {r['backend']} · {r['timing']} · cp {_canon(r['cp_size'])} · bs {_canon(r['bs'])}"
             f" · seq {_canon(r['seq_len'])}")
        pre = _canon(r["prefix_len"])
        out.append(s + (f" + prefix {pre}" if pre not in ("", "0") else ""))
    return out
