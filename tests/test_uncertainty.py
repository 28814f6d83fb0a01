"""The speedup interval of a cell (results.uncertainty): resampling of ranks' raw samples, the critical
path recomputed per resample (max of medians when simulated, per-sample max when torchrun)."""

import math

import numpy as np
import pytest
from scipy import stats

from cpbench.results.critical_path import critical_path
from cpbench.results.uncertainty import N_RESAMPLES, speedup_ci

RNG = np.random.default_rng(7)


def noisy(center, n=200, rel=0.01):
    return list(center * (1 + rel * RNG.standard_normal(n)))


def test_a_clear_speedup_has_an_interval_above_one_and_a_tie_contains_one():
    lo, hi = speedup_ci([noisy(1000), noisy(1100)], [noisy(800), noisy(820)], per_sample_max=False)
    assert 1 < lo < 1100 / 820 < hi < 1.5  # the critical path is rank 1 in both modes
    lo, hi = speedup_ci([noisy(1000), noisy(1000)], [noisy(1000), noisy(1000)], per_sample_max=False)
    assert lo < 1 < hi


def test_simulated_interval_is_scipys_bootstrap_of_the_max_of_medians():
    tc, fu = [noisy(1000, 50), noisy(1050, 50)], [noisy(990, 50), noisy(1000, 50)]
    got = speedup_ci(tc, fu, per_sample_max=False, seed=3)

    def stat(a, b, c, d, axis=-1):
        return np.maximum(np.median(a, axis=axis), np.median(b, axis=axis)) / np.maximum(
            np.median(c, axis=axis), np.median(d, axis=axis))

    want = stats.bootstrap((*map(np.asarray, tc), *map(np.asarray, fu)), stat, n_resamples=N_RESAMPLES,
                           method="percentile", vectorized=True, rng=np.random.default_rng(3))
    assert got == pytest.approx((want.confidence_interval.low, want.confidence_interval.high), rel=1e-12)


def test_torchrun_interval_resamples_the_per_sample_maximum():
    # rank 0 is slow on even samples, rank 1 on odd ones: each rank's median is ~100, but the
    # per-sample maximum is ~200 in every sample, so only the per-sample view sees the critical path
    a = [200.0 if i % 2 == 0 else 100.0 for i in range(40)]
    b = [100.0 if i % 2 == 0 else 200.0 for i in range(40)]
    flat = [100.0] * 40
    lo, hi = speedup_ci([a, b], [flat, flat], per_sample_max=True)
    assert lo == hi == 2.0
    lo, hi = speedup_ci([a, b], [flat, flat], per_sample_max=False)
    assert lo <= 1.5  # max of medians of each rank: 100-200 per rank, no longer 2.0 everywhere


def test_too_few_or_unequal_samples_give_no_interval():
    assert all(math.isnan(x) for x in speedup_ci([[1.0, 2.0]], [[1.0, 2.0]], per_sample_max=False))
    assert all(math.isnan(x) for x in speedup_ci([[1.0] * 5, [1.0] * 6], [[1.0] * 5, [1.0] * 5], per_sample_max=True))


def test_critical_path_carries_the_interval():
    import pandas as pd

    rows = []
    for rank, (tc, fu) in enumerate([(1000, 800), (1100, 820)]):
        for mode, c in (("two-call", tc), ("fused", fu)):
            xs = noisy(c, 100)
            rows.append({"model": "m", "backend": "torch", "dtype": "bf16", "launch": "simulated", "world_size": 1,
                         "gather": "none", "timing": "eager", "cp_size": 2, "bs": 1, "max_extend_len": 64, "prefix_len": 0,
                         "extend_lens": "64", "rank": rank, "mode": mode, "status": "ok", "reason": "",
                         "latency_us_median": float(np.median(xs)), "samples_us": xs})
    cp = critical_path(pd.DataFrame(rows))
    assert len(cp) == 1 and 1 < cp.loc[0, "speedup_ci_low"] < cp.loc[0, "speedup"] < cp.loc[0, "speedup_ci_high"]


def test_passes_widen_the_interval_to_cover_the_drift_between_them():
    """--passes: pass 1 says fused is 5 % faster, pass 2 (a later, slower clock) a tie; within each pass the
    noise is tiny. The interval over all samples alone would call it faster; over the passes it is a tie."""
    from cpbench.results.uncertainty import speedup_ci_over_passes, split_passes
    from cpbench.results.verdicts import speedup_verdict

    rng = np.random.default_rng(1)
    noisy = lambda m, n=30: list(m * (1 + 0.001 * rng.standard_normal(n)))  # noqa: E731
    two = [noisy(1050) + noisy(1000) for _ in range(2)]  # per rank: pass 1 then pass 2
    fused = [noisy(1000) + noisy(1000) for _ in range(2)]
    sizes = [[30, 30], [30, 30]]
    lo_all, hi_all = speedup_ci(two, fused, per_sample_max=False)
    lo, hi = speedup_ci_over_passes(two, fused, sizes, sizes)
    assert lo <= 1.0 + 1e-3 and hi >= 1.049 and lo <= lo_all and hi >= hi_all
    assert speedup_verdict(1.02, lo, hi) == "tie"
    assert split_passes([1, 2, 3], [2, 1]) == [[1, 2], [3]] and split_passes([1, 2, 3], [2, 2]) is None
    # passes that agree keep a clear verdict
    two = [noisy(1050) + noisy(1052) for _ in range(2)]
    lo, hi = speedup_ci_over_passes(two, fused, sizes, sizes)
    assert speedup_verdict(1.05, lo, hi) == "faster"


def test_an_interval_is_bootstrapped_once_per_process_for_the_same_samples(monkeypatch):
    """percentile_interval keys its cache on the statistic's name, the samples, the fixed arrays (shares), the
    resample count, seed and confidence: the same inputs give the first result without a second bootstrap; a
    change in any of them bootstraps again, and a cached interval equals a fresh one."""
    import cpbench.results.uncertainty as u

    calls = []
    real = stats.bootstrap
    monkeypatch.setattr(u.stats, "bootstrap", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(u, "_INTERVALS", type(u._INTERVALS)())
    tc, fu = [noisy(1000, 40), noisy(1050, 40)], [noisy(990, 40), noisy(1000, 40)]
    shares = (np.array([[0.4, 0.6], [0.5, 0.5]]), np.array([[0.4, 0.6], [0.45, 0.55]]))
    first = speedup_ci(tc, fu, per_sample_max=False, seed=3)
    assert speedup_ci([list(x) for x in tc], [list(x) for x in fu], per_sample_max=False, seed=3) == first
    assert len(calls) == 1
    other = [speedup_ci(tc, fu, per_sample_max=False, seed=4),  # seed
             speedup_ci(tc, fu, per_sample_max=True, seed=3),  # statistic
             speedup_ci(tc, fu, per_sample_max=False, seed=3, shares=shares),  # fixed arrays
             speedup_ci(tc, [fu[0], fu[1][:-1]], per_sample_max=False, seed=3)]  # samples
    assert len(calls) == 5 and len({first, *other}) == 5
    again_shares = speedup_ci(tc, fu, per_sample_max=False, seed=3, shares=(shares[0], shares[0]))
    assert len(calls) == 6 and again_shares != other[2]
    monkeypatch.setattr(u, "_INTERVALS", type(u._INTERVALS)())
    assert speedup_ci(tc, fu, per_sample_max=False, seed=3) == first and len(calls) == 7


def test_the_interval_cache_is_bounded(monkeypatch):
    import cpbench.results.uncertainty as u

    monkeypatch.setattr(u, "_INTERVALS", type(u._INTERVALS)())
    monkeypatch.setattr(u, "CACHE_ENTRIES", 3)
    a = np.arange(1.0, 11.0)
    for seed in range(5):
        u.percentile_interval((a,), lambda x, axis=-1: np.median(x, axis=axis), what="median", n_resamples=50,
                              seed=seed)
    assert len(u._INTERVALS) == 3


def test_the_cache_keys_on_the_statistic_follows_confidence_and_keeps_no_unseeded_interval(monkeypatch):
    """Two statistics under one ``what`` get their own intervals; speedup_ci reads CONFIDENCE at each call; a
    generator or None as seed draws anew and is never cached."""
    import cpbench.results.uncertainty as u

    monkeypatch.setattr(u, "_INTERVALS", type(u._INTERVALS)())
    a = (np.arange(1.0, 21.0),)
    med = u.percentile_interval(a, lambda x, axis=-1: np.median(x, axis=axis), what="centre", n_resamples=200, seed=0)
    mean = u.percentile_interval(a, lambda x, axis=-1: np.mean(x, axis=axis), what="centre", n_resamples=200, seed=0)
    u._INTERVALS.clear()
    assert mean == u.percentile_interval(a, lambda x, axis=-1: np.mean(x, axis=axis), what="centre",
                                         n_resamples=200, seed=0) != med
    tc, fu = [noisy(1000, 30)], [noisy(990, 30)]
    wide = speedup_ci(tc, fu, per_sample_max=False)
    monkeypatch.setattr(u, "CONFIDENCE", 0.5)
    narrow = speedup_ci(tc, fu, per_sample_max=False)
    assert wide[0] < narrow[0] <= narrow[1] < wide[1]
    u._INTERVALS.clear()
    u.percentile_interval(a, lambda x, axis=-1: np.median(x, axis=axis), what="m", n_resamples=50, seed=None)
    u.percentile_interval(a, lambda x, axis=-1: np.median(x, axis=axis), what="m", n_resamples=50,
                          seed=np.random.default_rng(1))
    assert len(u._INTERVALS) == 0
