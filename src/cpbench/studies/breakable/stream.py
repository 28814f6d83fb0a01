"""Timing of one layer at a time in a forward's steady state: the layers of several variants run back to back
on one stream, with no device sync between them, and a CUDA event after each (``--forward-layers kinds``).

Why not :func:`cpbench.measure.timing.time_interleaved`'s synchronised samples: a whole forward keeps the GPU
busy from its first layer to its last, so (1) each layer's host issue time hides behind the GPU work of the
layers before it whenever the host is the faster of the two, and (2) the GPU draws a forward's power and runs at
the clock that power allows. A lone layer after a device sync has neither: its first kernels wait for the host,
and the gaps between samples let the GPU cool and boost. On the H200 a 2 ms synchronised sample read fa3's
two-call layer 2.9 % slower than the whole forward, and one-layer samples read 1–2.7 % faster than whole forwards,
at SM clocks 50–100 MHz higher (docs/evidence/h200-forward-kinds.md). Here the variants' layers run in ABBA order
(A B B A ...) inside chunks of at least ``STREAM_CHUNK_MS`` of GPU work; a chunk starts behind a GPU spin
(``torch.cuda._sleep``, nvbench's blocking kernel) long enough for the host to issue its first layers, and ends
with a sync, where the precision stop is checked and the SM clock read. A sample is the GPU time between the
events around one layer: the GPU's time when the host keeps ahead, the host's issue pace when it does not (a
host-bound forward). On a CPU a sample is ``time.perf_counter`` around the call.
"""

from __future__ import annotations

import math
import time
import torch

from cpbench.measure.timing import Clock, Fn, gc_paused, ci_rel_width, repeats_for_budget, variant_info

STREAM_CHUNK_MS = 50.0  # GPU work between two syncs (where the precision stop is checked), at least one round
LEAD_MARGIN, LEAD_PAD_US = 1.5, 30.0  # a chunk's spin: 1.5 x the host's issue time of its first 4 layers + 30 µs
SPIN_CALIBRATION_CYCLES = 2_000_000  # about 1 ms of torch.cuda._sleep at H200 clocks

_cycles_per_us: dict[int, float] = {}


def spin_cycles_per_us() -> float:
    """``torch.cuda._sleep`` cycles per µs on the current device, measured once with CUDA events (the SM clock)."""
    dev = torch.cuda.current_device()
    if dev not in _cycles_per_us:
        torch.cuda._sleep(1000)  # load the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(SPIN_CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        _cycles_per_us[dev] = SPIN_CALIBRATION_CYCLES / max(start.elapsed_time(end) * 1e3, 1e-3)
    return _cycles_per_us[dev]


def run_chunk(fns: list[Fn], clock: Clock, lead_us: float) -> tuple[list[float], list[float]]:
    """Run ``fns`` back to back with no sync between them; return, per fn, its time (µs: CUDA events around it,
    the GPU having spun ``lead_us`` first; perf_counter on a CPU) and the host's time to issue it (µs; NaN on a
    CPU, where issuing is executing). Ends synchronised."""
    if not clock.cuda:
        out = []
        for f in fns:
            t0 = time.perf_counter()
            f()
            out.append((time.perf_counter() - t0) * 1e6)
        return out, [math.nan] * len(fns)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(len(fns) + 1)]
    torch.cuda.synchronize()
    if lead_us > 0:
        torch.cuda._sleep(int(lead_us * spin_cycles_per_us()))
    events[0].record()
    host = []
    for f, e in zip(fns, events[1:]):
        t0 = time.perf_counter()
        f()
        host.append((time.perf_counter() - t0) * 1e6)
        e.record()
    events[-1].synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])], host


def time_stream(fns: dict[str, Fn], clock: Clock, *, warmup: int, budget_ms: float, min_reps: int,
                max_reps: int = 2000, rel_ci: float | None = None, min_stop: int = 1, info: dict | None = None,
                times=None, chunk_ms: float = STREAM_CHUNK_MS,
                precise: Callable[[dict[str, list[float]]], bool] | None = None) -> dict[str, list[float]]:
    """Time each variant (one layer per call) in a forward's steady state; return ``name -> raw samples (µs)``.

    ``warmup`` untimed rounds first (a round: every variant once). Then rounds in ABBA order (A B ... B A: two
    samples of every variant a round) inside chunks of about ``chunk_ms`` (module docstring); the first round
    estimates the cost and the sample count is chosen so each variant gets about ``budget_ms`` of samples (at least
    ``min_reps``, at most ``max_reps``, even). Sample i of every variant comes from the same round, so samples pair
    up by index. Stopping by noise as :func:`cpbench.measure.timing.time_interleaved` (at a chunk's end, once every
    variant holds ``max(min_reps, min_stop)`` samples and its median's 95 % CI is within ``rel_ci``; ``precise``, when
    given, replaces that last test: ``precise(samples)`` says whether what the samples estimate is precise enough).
    ``info`` receives per variant ``stop_reason``, ``ci_rel_width``, ``host_launch_us`` (median host issue time of
    one call), ``host_samples_us`` (each; [] on a CPU) and the SM clock range read after each chunk;
    ``times`` (measure/walltime.PhaseTimes) the wall time of the warm-up and the samples. Simulated ranks only
    (no barrier: real ranks time whole forwards). Raises what the callables raise.
    """
    with gc_paused():
        return _time_stream(fns, clock, warmup, budget_ms, min_reps, max_reps, rel_ci, min_stop, info, times,
                            chunk_ms, precise)


def _time_stream(fns, clock, warmup, budget_ms, min_reps, max_reps, rel_ci, min_stop, info, times,
                 chunk_ms, precise) -> dict[str, list[float]]:
    t0 = time.perf_counter()
    names = list(fns)
    order = names + names[::-1]
    warm_us: list[float] = []  # the host's issue time of each call in the last warm-up round
    for _ in range(warmup):
        warm_us = []
        for n in names:
            t = time.perf_counter()
            fns[n]()
            warm_us.append((time.perf_counter() - t) * 1e6)
    clock.sync()
    t1 = time.perf_counter()
    samples: dict[str, list[float]] = {n: [] for n in names}
    issued: dict[str, list[float]] = {n: [] for n in names}
    clocks: list[float] = []
    lead = [LEAD_MARGIN * sum(warm_us[:4]) + LEAD_PAD_US if warm_us and clock.cuda else 0.0]

    def chunk(rounds: int) -> None:
        gpu, host = run_chunk([fns[n] for _ in range(rounds) for n in order], clock, lead[0])
        for i, (g, h) in enumerate(zip(gpu, host)):
            n = order[i % len(order)]
            samples[n].append(g)
            issued[n].append(h)
        if clock.cuda:
            lead[0] = LEAD_MARGIN * sum(host[:4]) + LEAD_PAD_US
        if clock.read_clock_mhz is not None:
            clocks.append(clock.read_clock_mhz())

    chunk(1)
    round_us = sum(max(samples[n]) for n in names) * 2
    reps = repeats_for_budget(max(max(s) for s in samples.values()), budget_ms, min_reps, max_reps)
    rounds_left = max(0, math.ceil(reps / 2) - 1)
    per_chunk = max(1, int(chunk_ms * 1e3 // max(round_us, 1e-3)))
    reason = "max samples" if reps >= max_reps else "time budget"
    while rounds_left > 0:
        if rel_ci and len(samples[names[0]]) >= max(min_reps, min_stop) and \
                (precise(samples) if precise else all(ci_rel_width(samples[n]) <= rel_ci for n in names)):
            reason = "precision"
            break
        k = min(per_chunk, rounds_left)
        chunk(k)
        rounds_left -= k
    if times is not None:
        times.add("warmup", t1 - t0)
        times.add("samples", time.perf_counter() - t1)
    if info is not None:
        info.update({n: variant_info(samples[n], reason, issued[n], clocks, clock.cuda) for n in names})
    return samples

