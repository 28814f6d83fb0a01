"""Uncertainty of a cell's critical-path speedup: a 95 % bootstrap interval (scipy.stats.bootstrap).

The critical path of a mode is the slowest rank: a simulated launch's ranks ran one after another,
so each resample redraws every rank's samples independently and takes the maximum of the ranks'
medians; a torchrun launch's ranks ran the same agreed samples together, so its critical path is
the per-sample maximum over ranks, one series per mode, and the series are redrawn. The interval
is the percentile interval of ``two-call critical / fused critical`` over the resamples (fixed seed,
so a report is reproducible). Every cpbench interval goes through :func:`percentile_interval`, which keeps
each interval it computed for the rest of the process.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import warnings
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
from scipy import stats

N_RESAMPLES = 999
CONFIDENCE = 0.95
CACHE_ENTRIES = 65536  # intervals kept per process (two floats each, keyed by a 16-byte digest)

_INTERVALS: OrderedDict[bytes, tuple[float, float]] = OrderedDict()


def percentile_interval(data: Sequence[np.ndarray], statistic: Callable, *, what: str, n_resamples: int,
                        seed, confidence: float = CONFIDENCE, extra: Sequence = (),
                        batch: int | None = None) -> tuple[float, float]:
    """The percentile-bootstrap interval of ``statistic`` over ``data`` (``scipy.stats.bootstrap``:
    vectorised, unpaired, each array resampled independently with replacement, the generator
    ``numpy.random.default_rng(seed)``), as ``(low, high)``.

    With an integer seed, the same statistic (its code, :func:`_identity`, and ``what``: whatever fixes it beyond
    ``data``, such as values its closure captures), arrays, ``extra`` arrays (e.g. layer-kind shares), resample count, confidence and batch give the
    same interval, so each is computed once per process and then read from a bounded cache
    (:data:`CACHE_ENTRIES`, about 16 MB when full): a cell analysed again in one process (a report beside its
    simulated twin, a notebook that reports and then compares a run) is not bootstrapped again. Any other seed
    is not cached. scipy's warning that identical samples give a degenerate interval is silenced: such data give
    a point or NaN interval.

    Args:
        data: 1-D float arrays (µs), one per sample set the statistic takes.
        statistic: ``statistic(*arrays, axis=-1)``, vectorised over resamples along ``axis``.
        seed: an int (the interval is cached), or anything ``numpy.random.default_rng`` takes (not cached).
        batch: resamples per vectorised call (bounds memory); None: all at once.
    Returns:
        ``(low, high)`` in the statistic's unit; NaNs where scipy gives no interval.
    """
    arrays = [np.ascontiguousarray(a, dtype=float) for a in data]
    fixed = [np.ascontiguousarray(a, dtype=float) for a in extra]
    key = None
    if isinstance(seed, (int, np.integer)):  # a generator or None draws anew each call: nothing to keep
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((what, _identity(statistic), n_resamples, int(seed), confidence, batch, [a.shape for a in arrays],
                       [a.shape for a in fixed])).encode())
        for a in arrays + fixed:
            h.update(a.tobytes())
        key = h.digest()
        if key in _INTERVALS:
            _INTERVALS.move_to_end(key)
            return _INTERVALS[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap(tuple(arrays), statistic, n_resamples=n_resamples, batch=batch,
                              confidence_level=confidence, method="percentile", vectorized=True, paired=False,
                              **{_RNG_KW: np.random.default_rng(seed)})
    out = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if key is not None:
        _INTERVALS[key] = out
        if len(_INTERVALS) > CACHE_ENTRIES:
            _INTERVALS.popitem(last=False)
    return out


def critical_per_sample(samples: Sequence[Sequence[float]]) -> np.ndarray | None:
    """The critical path of each sample of a torchrun launch: the maximum over ranks of sample i (µs).
    ``samples``: per rank, its raw samples in the agreed order. None when there are none or the ranks'
    counts differ (they never do within one launch; a hand-edited or partial run)."""
    arrays = [np.asarray(s, dtype=float) for s in samples if s is not None and hasattr(s, "__len__")]
    if not arrays or len(arrays) != len(samples) or len({len(a) for a in arrays}) != 1 or not len(arrays[0]):
        return None
    return np.max(np.vstack(arrays), axis=0)


def _clean(xs) -> np.ndarray:
    a = np.asarray(list(xs) if xs is not None else [], dtype=float)
    return a[np.isfinite(a) & (a > 0)]


def layer_synced(medians, shares) -> np.ndarray:
    """The critical path of a forward whose ranks wait for each other at every layer: the sum over layer
    kinds of the slowest rank's time in that kind, ``sum_k max_r shares[r][k] * medians[r]`` (µs).

    Args:
        medians: per rank, its forward time (µs); an array of shape ``[ranks]`` or ``[ranks, resamples]``.
        shares: per rank, the fraction of its forward each layer kind takes (``[ranks, kinds]``, rows sum to 1;
            layers of one kind are identical, so ``share * forward`` is that kind's layers' time).
    Returns ``[]``-shaped (one value) or ``[resamples]``. Never below the whole-forward maximum over ranks.
    """
    med = np.asarray(medians, dtype=float)
    sh = np.asarray(shares, dtype=float)
    per_kind = sh[:, :, None] * (med[:, None, :] if med.ndim == 2 else med[:, None, None])  # [ranks, kinds, n]
    out = per_kind.max(axis=0).sum(axis=0)
    return out if med.ndim == 2 else out[0]


def speedup_ci(two_call: Sequence[Sequence[float]], fused: Sequence[Sequence[float]], *, per_sample_max: bool,
               seed: int = 0, shares: tuple | None = None) -> tuple[float, float]:
    """95 % bootstrap interval of ``critical(two-call) / critical(fused)``.

    Args:
        two_call, fused: per rank, that rank's raw samples (µs). With ``per_sample_max`` (torchrun)
            every rank of a mode holds the same number of samples, sample i of each being the same forward.
        per_sample_max: the critical path is the per-sample maximum over ranks (torchrun), else the
            maximum over ranks of each rank's median (simulated).
        shares: simulated only: ``(two-call shares, fused shares)``, per rank the fraction of its forward each
            layer kind takes; the critical path is then :func:`layer_synced` of the ranks' medians.
    Returns:
        ``(low, high)``; NaNs when a rank has fewer than 3 usable samples or the data are degenerate.
    """
    tc = [_clean(x) for x in two_call]
    fu = [_clean(x) for x in fused]
    if not tc or not fu or min(len(x) for x in tc + fu) < 3:
        return math.nan, math.nan
    if per_sample_max:
        crit = critical_per_sample(tc), critical_per_sample(fu)
        if crit[0] is None or crit[1] is None:
            return math.nan, math.nan
        data = crit

        def statistic(a, b, axis=-1):
            return np.median(a, axis=axis) / np.median(b, axis=axis)
    else:
        data = (*tc, *fu)
        k = len(tc)

        def statistic(*arrays, axis=-1):
            meds = [np.median(a, axis=axis) for a in arrays]
            if shares is not None:  # meds: per rank, [resamples]
                return layer_synced(np.asarray(meds[:k]), shares[0]) / layer_synced(np.asarray(meds[k:]), shares[1])
            return np.max(meds[:k], axis=0) / np.max(meds[k:], axis=0)
    if all(np.ptp(a) == 0 for a in data):  # constant samples: no spread to resample
        s = float(statistic(*[a[None, :] for a in data])[0])
        return s, s
    what = ("speedup: median of the per-sample maximum over ranks" if per_sample_max else
            f"speedup: {'layer-synced' if shares is not None else 'maximum'} of {k} ranks' medians")
    return percentile_interval(data, statistic, what=what, n_resamples=N_RESAMPLES, seed=seed, confidence=CONFIDENCE,
                               extra=() if shares is None or per_sample_max else shares)


def split_passes(samples: Sequence[float], sizes: Sequence[int] | None) -> list[list[float]] | None:
    """A row's ``samples_us`` cut into its passes by ``pass_sizes``; None when the sizes do not add up (a
    hand-edited row) or there is one pass."""
    if sizes is None or not hasattr(sizes, "__len__") or len(sizes) < 2 or sum(int(n) for n in sizes) != len(samples):
        return None
    out, start = [], 0
    for n in sizes:
        out.append(list(samples[start:start + int(n)]))
        start += int(n)
    return out


def speedup_ci_over_passes(two_call: Sequence[Sequence[float]], fused: Sequence[Sequence[float]],
                           sizes_two: Sequence, sizes_fused: Sequence, *, shares: tuple | None = None,
                           seed: int = 0) -> tuple[float, float]:
    """The speedup interval of a simulated cell timed in several passes (``--passes``): the hull of the
    interval over all samples and of each pass's own interval (a pass with too few samples for one counts as
    its point estimate). A faster / slower verdict therefore needs every pass to agree, and the interval
    covers the drift between passes as well as the noise within each.

    Args: per rank, its raw samples (µs) and its ``pass_sizes``, by mode; ``shares`` as :func:`speedup_ci`.
    Returns ``(low, high)``; NaNs when the ranks' passes do not line up or no interval can be formed.
    """
    cut = [[split_passes(s, n) for s, n in zip(samples, sizes)] for samples, sizes in
           ((two_call, sizes_two), (fused, sizes_fused))]
    counts = {len(p) if p is not None else 0 for mode in cut for p in mode}
    if len(counts) != 1 or 0 in counts:
        return math.nan, math.nan
    lo, hi = speedup_ci(two_call, fused, per_sample_max=False, seed=seed, shares=shares)
    bounds = [(lo, hi)] if math.isfinite(lo) and math.isfinite(hi) else []
    for i in range(counts.pop()):
        tc, fu = [p[i] for p in cut[0]], [p[i] for p in cut[1]]
        plo, phi = speedup_ci(tc, fu, per_sample_max=False, seed=seed, shares=shares)
        if not (math.isfinite(plo) and math.isfinite(phi)):
            meds = [np.median(_clean(x)) if len(_clean(x)) else math.nan for x in tc + fu]
            k = len(tc)
            point = (float(layer_synced(meds[:k], shares[0]) / layer_synced(meds[k:], shares[1])) if shares is not None
                     else max(meds[:k]) / max(meds[k:]))
            plo = phi = point
        bounds.append((plo, phi))
    finite = [b for b in bounds if math.isfinite(b[0]) and math.isfinite(b[1])]
    if not finite:
        return math.nan, math.nan
    return min(b[0] for b in finite), max(b[1] for b in finite)


def _identity(fn: Callable) -> tuple:
    """What tells one statistic from another in the cache key: its qualified name and, for a Python function, its
    code (file, line, bytecode, names and constants: two lambdas in one function differ). Values a closure captures
    are not in it: ``what`` names them."""
    code = getattr(fn, "__code__", None)
    where = (code.co_filename, code.co_firstlineno, code.co_code, code.co_names, code.co_consts) if code else ()
    return (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", type(fn).__name__), *where)


# scipy >= 1.15 takes the generator as ``rng=``; older releases (the floor is 1.10) as ``random_state=``
_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
