"""Timing passes: every cell timed again later in the sweep, so the interval covers drift between passes
(clock, power, placement), not only noise within one (docs/design.md §4, after asv, which runs a benchmark
in several processes).

A sweep with ``--passes P`` measures every cell in pass 1, then every cell again in pass 2, and so on, each
pass with ``budget_ms / P`` per variant and ABBA order inside it. A later pass times only (the fp32 check and
the profiled forward ran in pass 1); :func:`merge_pass` folds its row into the stored one: the samples are
appended, ``pass_sizes`` records how many each pass gave, and the summary statistics are recomputed over all
of them. The speedup interval is then taken over the passes (results/uncertainty.py).
"""

from __future__ import annotations

import math
import statistics

from cpbench.domain.modes import Status
from cpbench.measure.timing import summarize

# columns a later pass replaces or extends; every other column keeps pass 1's value (its check, kernel counts)
_SUMMARY = ("latency_us_median", "latency_us_p10", "latency_us_p90", "latency_us_mean", "latency_us_ci_low",
            "latency_us_ci_high", "n_samples")


def merge_pass(stored: dict, new: dict) -> dict:
    """``stored`` (the row of passes 1..p-1) with pass p's row ``new`` folded in: ``samples_us`` and
    ``host_samples_us`` appended, ``pass_sizes`` (samples per pass, in order) extended, ``passes`` counted,
    the latency summary recomputed over every sample (µs), the SM clock range widened, the stop reason and
    CI width of the last pass. A ``new`` row that is not ``ok`` leaves ``stored`` as it was (one pass fewer)."""
    if new.get("status") != Status.OK or stored.get("status") != Status.OK:
        return stored
    old_samples = list(stored.get("samples_us") or [])
    sizes = list(stored.get("pass_sizes") or [len(old_samples)])
    samples = old_samples + list(new.get("samples_us") or [])
    out = {**stored, **summarize(samples), "samples_us": samples, "pass_sizes": sizes + [len(new["samples_us"])],
           "passes": len(sizes) + 1}
    out = {k: out[k] for k in stored} | {k: out[k] for k in ("pass_sizes", "passes", *_SUMMARY)}
    host = list(stored.get("host_samples_us") or []) + list(new.get("host_samples_us") or [])
    if host:
        out["host_samples_us"] = host
        out["host_launch_us"] = statistics.median(host)
    for key, pick in (("sm_clock_mhz_min", min), ("sm_clock_mhz_max", max)):
        vals = [v for v in (stored.get(key), new.get(key)) if isinstance(v, (int, float)) and not math.isnan(v)]
        if vals:
            out[key] = pick(vals)
    for key in ("stop_reason", "ci_rel_width", "sm_clock_mhz_after"):
        if key in new:
            out[key] = new[key]
    return out
