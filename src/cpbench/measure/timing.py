"""Timing of whole forwards: one function per clock, returning every raw sample (µs).

What a sample includes (after flashinfer's bench_gpu_time, documented so numbers can be compared):

* CUDA, eager: the device is synchronised before each sample, then CUDA events bracket one call of
  ``fn`` on the current stream. The sample is the device time from the first to the last event, so it
  includes any idle gap while the host is still launching (launch overhead is visible).
* CUDA, graph: ``fn`` is captured once into a CUDA graph; a sample brackets one ``graph.replay()``.
  Host launch cost is gone; what remains is kernel time plus inter-kernel gaps inside the graph.
* CPU: ``time.perf_counter`` around one call of ``fn``.

Interleaving: :func:`time_interleaved` runs the variants in ABBA order (A B B A A B ...) on identical
inputs, so clock or thermal drift hits all of them alike. No L2 flush between samples: consecutive
forwards in an engine do not flush either.

Across ranks (torchrun): every rank gets the same repeat count (``agree``: the maximum over ranks of
each rank's own choice) and the same ABBA order, and waits at a barrier after the device sync before
every sample, so sample i of every rank covers the same forward and the critical path of a sample is
the maximum over ranks of sample i.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from typing import Callable

import torch

from cpbench.results.policy import FLOORS

Fn = Callable[[], None]
MIN_STOP_SAMPLES = FLOORS.stop  # fewer samples give too wide a median CI for the stopping rule to mean anything


class Clock:
    """Times single calls on one device (``"cuda"`` or ``"cpu"``)."""

    def __init__(self, device: torch.device, read_clock_mhz: Callable[[], float] | None = None) -> None:
        self.cuda = device.type == "cuda"
        self.last_enqueue_us = math.nan  # host time of the last CUDA sample's call of fn (NaN on CPU)
        # SM clock read after each CUDA sample, outside the timed region (NVML, measure.env.sm_clock_mhz)
        self.read_clock_mhz = read_clock_mhz
        self.last_clock_mhz = math.nan

    def sample_us(self, fn: Fn, barrier: Fn | None = None) -> float:
        """Time one call of ``fn``, µs (see the module docstring for what it includes); ``barrier``
        (ranks of a launch) runs after the device sync, before the clock starts."""
        if not self.cuda:
            if barrier is not None:
                barrier()
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6
        torch.cuda.synchronize()
        if barrier is not None:
            barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        self.last_enqueue_us = (time.perf_counter() - t0) * 1e6  # enqueueing only: no sync inside fn
        end.record()
        end.synchronize()
        if self.read_clock_mhz is not None:
            self.last_clock_mhz = self.read_clock_mhz()
        return start.elapsed_time(end) * 1e3

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


_GRAPHS: list = []  # graphs captured and not yet released


def release_graphs() -> None:
    """``reset()`` every graph :func:`capture_graph` made. A graph holding an NCCL collective that is
    not reset before the group is torn down makes ``barrier``/``destroy_process_group`` hang."""
    while _GRAPHS:
        _GRAPHS.pop().reset()


def capture_graph(fn: Fn, warmup: int = 1) -> Fn:
    """Capture ``fn`` into a CUDA graph (after ``warmup`` runs on a side stream, as torch requires) and
    return a zero-argument replay. ``fn`` must not sync or allocate outputs (plans stay outside).
    Call :func:`release_graphs` when done with the replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    _GRAPHS.append(graph)
    return graph.replay


def capture_segments(fns: list[Fn], owner: list | None = None) -> list[Fn]:
    """Capture each of ``fns`` into a CUDA graph of its own, all in one memory pool, and return their replays
    in the same order (the segments of a breakable forward). Each fn runs once on a side stream first (cuBLAS
    workspaces, as torch requires). Sharing the pool is safe because the segments replay one after another
    on one stream and keep nothing alive across each other: what outlives a segment is a static buffer
    allocated before capture. Call :func:`release_graphs` when done with the replays, or, with ``owner`` (a list
    that receives the graphs instead), reset the graphs it holds."""
    if not fns:
        return []
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    pool = torch.cuda.graph_pool_handle()
    replays = []
    for fn in fns:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            fn()
        (_GRAPHS if owner is None else owner).append(graph)
        replays.append(graph.replay)
    torch.cuda.synchronize()
    return replays


def repeats_for_budget(estimate_us: float, budget_ms: float, min_reps: int = FLOORS.cuda, max_reps: int = 2000) -> int:
    """Samples that fit ``budget_ms`` per variant at ``estimate_us`` each, clamped to [min, max]."""
    if estimate_us <= 0:
        return max_reps
    return int(min(max_reps, max(min_reps, budget_ms * 1e3 // estimate_us)))


def time_interleaved(fns: dict[str, Fn], clock: Clock, *, warmup: int, budget_ms: float,
                     min_reps: int = FLOORS.cuda, max_reps: int = 2000, agree: Callable[[float], float] = lambda x: x,
                     barrier: Fn | None = None, rel_ci: float | None = None,
                     info: dict | None = None, times=None, min_stop: int = MIN_STOP_SAMPLES) -> dict[str, list[float]]:
    """Time each variant in ABBA order; return ``name -> raw samples (µs)``.

    ``warmup`` untimed calls of each variant run first (only one when the rest would overrun
    ``budget_ms``; docs/design.md §4 says why not fewer); one more timed call per variant estimates the
    cost, and the repeat count is chosen so each variant gets about ``budget_ms`` of samples (at least
    ``min_reps``). Every timed sample is kept, the estimate included. ``agree`` turns this rank's warm-up and repeat counts into the ones
    every rank uses (max over ranks); ``barrier`` runs before every sample (see the module docstring).
    The garbage collector is paused meanwhile.

    Stopping by noise (nvbench's criterion): with ``rel_ci``, sampling stops at the end of an ABBA cycle
    once every variant holds at least ``max(min_reps, min_stop)`` samples (``min_stop``: MIN_STOP_SAMPLES, or
    its share of one of several timing passes, whose samples are pooled) and the 95 % CI of its
    median is within ``rel_ci`` of the median (on every rank: agreed); ``budget_ms`` stays the cap.
    ``info`` (optional) receives ``name -> {stop_reason, ci_rel_width, host_launch_us, host_samples_us,
    sm_clock_mhz_min, sm_clock_mhz_max}``: the stop reason (``precision``, ``time budget`` or ``max samples``),
    the achieved CI width, the median host time to enqueue one call inside the timed samples and each such
    time (µs; NaN and [] on CPU, where enqueueing is executing), and the range of the SM clock read after each sample (MHz, NaN unknown).
    ``times`` (optional, measure/walltime.PhaseTimes) receives the wall time of the warm-up and the samples.
    """
    with gc_paused():
        return _time_interleaved(fns, clock, warmup, budget_ms, min_reps, max_reps, agree, barrier, rel_ci, info,
                                 times, min_stop)


@contextlib.contextmanager
def gc_paused():
    """Python's garbage collector off while timing (as ``timeit`` does): a collection inside a sample
    would be charged to whichever variant happened to run."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _time_interleaved(fns, clock, warmup, budget_ms, min_reps, max_reps, agree, barrier, rel_ci,
                      info, times, min_stop=MIN_STOP_SAMPLES) -> dict[str, list[float]]:
    t0 = time.perf_counter()
    names = list(fns)
    for name in names:  # one untimed call each, then the rest of the warm-up if it fits the budget
        if warmup:
            first = clock.sample_us(fns[name], barrier)
            more = int(agree(warmup - 1 if first * (warmup - 1) < budget_ms * 1e3 else 0))
            for _ in range(more):
                fns[name]()
    clock.sync()
    t1 = time.perf_counter()
    samples: dict[str, list[float]] = {n: [] for n in names}
    enqueue: dict[str, list[float]] = {n: [] for n in names}
    clocks: dict[str, list[float]] = {n: [] for n in names}

    def take(n: str) -> None:
        samples[n].append(clock.sample_us(fns[n], barrier))
        enqueue[n].append(clock.last_enqueue_us)
        clocks[n].append(getattr(clock, "last_clock_mhz", math.nan))

    for n in names:
        take(n)
    reps = int(agree(repeats_for_budget(max(s[0] for s in samples.values()), budget_ms, min_reps, max_reps)))
    order = names + names[::-1]  # A B B A
    reason = "max samples" if reps >= max_reps else "time budget"
    for i in range(max(0, reps - 1) * len(names)):
        if rel_ci and i % len(order) == 0 and len(samples[names[0]]) >= max(min_reps, min_stop):
            precise = all(ci_rel_width(samples[n]) <= rel_ci for n in names)
            if not agree(0.0 if precise else 1.0):  # every rank's variants are precise enough
                reason = "precision"
                break
        take(order[i % len(order)])
    if times is not None:
        times.add("warmup", t1 - t0)
        times.add("samples", time.perf_counter() - t1)
    if info is not None:
        info.update({n: variant_info(samples[n], reason, enqueue[n], clocks[n], clock.cuda) for n in names})
    return samples


def variant_info(samples: list[float], reason: str, issued_us: list[float], clocks_mhz: list[float],
                 cuda: bool) -> dict:
    """What a timer tells about one variant's samples (µs): ``stop_reason``, ``ci_rel_width``, ``host_launch_us``
    (median host time to issue one sample's work; NaN on a CPU, where issuing is executing), ``host_samples_us``
    (each; [] on a CPU) and :func:`clock_range` of the SM clocks read meanwhile."""
    return {"stop_reason": reason, "ci_rel_width": ci_rel_width(samples),
            "host_launch_us": statistics.median(issued_us) if cuda else math.nan,
            "host_samples_us": [round(x, 3) for x in issued_us] if cuda else [],
            **clock_range(clocks_mhz)}


def clock_range(clocks_mhz: list[float]) -> dict[str, float]:
    """``sm_clock_mhz_min`` / ``sm_clock_mhz_max`` over the SM clocks read after each timed sample (MHz;
    NaN when none was read: CPU, or NVML unavailable)."""
    known = [c for c in clocks_mhz if c == c]
    return {"sm_clock_mhz_min": min(known) if known else math.nan,
            "sm_clock_mhz_max": max(known) if known else math.nan}


def ci_rel_width(samples: list[float]) -> float:
    """Width of the 95 % CI of the median (:func:`summarize`) relative to the median; inf when undefined."""
    st = summarize(samples)
    med = st["latency_us_median"]
    return (st["latency_us_ci_high"] - st["latency_us_ci_low"]) / med if med and med > 0 else math.inf


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, p10, p90, mean and a distribution-free 95% CI of the median (order statistics at
    ``n/2 -+ 1.96 sqrt(n)/2``), all µs, plus ``n_samples``."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        nan = math.nan
        return dict(latency_us_median=nan, latency_us_p10=nan, latency_us_p90=nan, latency_us_mean=nan,
                    latency_us_ci_low=nan, latency_us_ci_high=nan, n_samples=0)

    def q(p: float) -> float:  # linear interpolation between order statistics
        pos = p * (n - 1)
        lo = int(math.floor(pos))
        hi = min(n - 1, lo + 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    half = 1.96 * math.sqrt(n) / 2
    lo_i = max(0, int(math.floor(n / 2 - half)))
    hi_i = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return dict(latency_us_median=q(0.5), latency_us_p10=q(0.1), latency_us_p90=q(0.9),
                latency_us_mean=sum(xs) / n, latency_us_ci_low=xs[lo_i], latency_us_ci_high=xs[hi_i],
                n_samples=n)


def time_op_us(fn: Fn, clock: Clock, reps: int = 20) -> float:
    """Median time of a small op (e.g. the page-table duplication), µs."""
    fn()
    return sorted(clock.sample_us(fn) for _ in range(reps))[reps // 2]
