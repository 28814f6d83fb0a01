"""One tie rule for every verdict cpbench prints: the report, the speedup heatmap and ``compare``.

A value is compared with 1 through its 95 % interval ``[low, high]``:

* the interval lies above 1 (``low > 1``): above;   * below 1 (``high < 1``): below;
* the interval contains 1: a tie (the difference is within the measured noise).

Without a finite interval (no raw samples, no row CI) the value itself decides, with a tie band of
±``TIE_BAND`` around 1. A value that cannot be a speedup or a latency ratio (non-finite, zero or
negative) has no verdict (``NO_VERDICT``): it is "not comparable", never a tie.

Plain Python (no numpy, pandas or torch), so plots and compare share it.
"""

from __future__ import annotations

import math

from cpbench.results.policy import FLOORS

TIE_BAND = 0.02
"""Tie band (fraction) used only when a value has no finite 95 % interval."""

NO_VERDICT = "n/a"

MIN_SAMPLES = FLOORS.gate
"""Timed samples both rows of a comparison need before a slowdown can count as a regression (the compare
gate; ``cpbench compare --min-samples``; results/policy.SampleFloors)."""


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def side_of_one(value, low=math.nan, high=math.nan) -> int | None:
    """+1 if ``value`` is above 1 by the rule of this module, -1 if below, 0 for a tie, None when
    ``value`` is not a finite positive number (no verdict)."""
    v, lo, hi = _f(value), _f(low), _f(high)
    if not (math.isfinite(v) and v > 0):
        return None
    if math.isfinite(lo) and math.isfinite(hi) and lo > 0:
        return 1 if lo > 1 else -1 if hi < 1 else 0
    return 1 if v > 1 + TIE_BAND else -1 if v < 1 - TIE_BAND else 0


def speedup_verdict(speedup, low=math.nan, high=math.nan) -> str:
    """Verdict on a speedup ``two-call / fused`` (> 1: fused faster) and its 95 % interval:
    ``faster`` / ``slower`` / ``tie``, or ``NO_VERDICT`` (see the module docstring)."""
    s = side_of_one(speedup, low, high)
    return NO_VERDICT if s is None else ("slower", "tie", "faster")[s + 1]


def ratio_verdict(ratio, low=math.nan, high=math.nan) -> str:
    """Verdict on a latency ratio ``new / base`` (< 1: new faster) and its 95 % interval:
    ``faster`` / ``slower`` / ``tie`` (of NEW against BASE), or ``NO_VERDICT``."""
    s = side_of_one(ratio, low, high)
    return NO_VERDICT if s is None else ("faster", "tie", "slower")[s + 1]


def is_tie(value, low=math.nan, high=math.nan) -> bool:
    """True when the rule calls ``value`` a tie (never for a value without a verdict)."""
    return side_of_one(value, low, high) == 0


# What a run's timings claim, as the report, the console and cpbench.Run word it
CPU_CLAIM = "functional check, not a benchmark"
GPU_CLAIM = "benchmark"
CPU_CLAIM_NOTE = ("CPU timings move by tens of percent between runs: speedup is a ratio of two such timings, not a "
                  "speedup, and its interval carries no verdict")


def on_cpu(manifest: dict) -> bool:
    """True when the run's manifest says it ran on a CPU (``device`` ``cpu``, or the config's): a functional
    check of the torch reference, not a benchmark (no speedup verdict, no compare gate)."""
    config = manifest.get("config")
    device = manifest.get("device") or (config.get("device") if isinstance(config, dict) else "") or ""
    return str(device).strip().lower().startswith("cpu")


def saved_share(ratio) -> float:
    """The share of the base time the new path saves, ``1 - 1 / ratio``, from a latency ratio ``base / new`` (a
    speedup ``two-call / fused``: the share of the two-call time fused saves); negative when it costs. NaN for a
    ratio that is not a finite positive number. Monotonic, so an interval of the ratio maps end to end."""
    v = _f(ratio)
    return 1 - 1 / v if math.isfinite(v) and v > 0 else math.nan


def effect_text(ratio, low=math.nan, high=math.nan) -> str:
    """The one notation of every effect cpbench prints (report, console, compare, charts): a latency ratio
    ``base / new`` (a speedup ``two-call / fused``) and its 95 % interval as the signed share of the base time the
    new path saves, in percent, the interval in brackets in the same unit: ``+0.7 % [+0.1, +1.4]`` (``+``: it
    saves, ``−``: it costs; ``1.007`` is ``+0.7 %``, ``2.0`` is ``+50.0 %``). Decimals are added (up to three)
    until an interval that excludes 0 no longer prints an end as 0, so a printed verdict never contradicts its
    printed interval. ``—`` for a ratio that is not a finite positive number."""
    v, lo, hi = _f(ratio), _f(low), _f(high)
    if not (math.isfinite(v) and v > 0):
        return "—"
    has_ci = math.isfinite(lo) and math.isfinite(hi) and lo > 0
    side = side_of_one(v, lo, hi) if has_ci else 0
    ends = [100 * saved_share(x) for x in ((v, lo, hi) if has_ci else (v,))]
    for d in (1, 2, 3):
        text = [f"{x:+.{d}f}" for x in ends]
        if not side or all(t.strip("+-0.") for t in text[1:]):  # no end of an excluding interval reads 0
            break
    text = [t.replace("-", "−") for t in text]
    return f"{text[0]} %" + (f" [{text[1]}, {text[2]}]" if has_ci else "")


def verdict_text(ratio, low=math.nan, high=math.nan) -> str:
    """:func:`effect_text` after its verdict in words (:func:`speedup_verdict`: ``faster``, ``slower``, ``tie``):
    ``faster +0.7 % [+0.1, +1.4]``; the effect alone when there is no verdict."""
    word = speedup_verdict(ratio, low, high)
    return effect_text(ratio, low, high) if word == NO_VERDICT else f"{word} {effect_text(ratio, low, high)}"


def inverse(x) -> float:
    """``1 / x`` for a finite positive ``x``, else NaN: a ``new / base`` ratio (compare) read as ``base / new``, the
    direction :func:`effect_text` takes (the interval's ends swap: ``inverse(high)`` is the new low)."""
    v = _f(x)
    return 1 / v if math.isfinite(v) and v > 0 else math.nan
