"""Prefill forwards, attention kernels per forward and per-layer kernel time, found in an engine's rank trace
(:class:`cpbench.studies.engine_traces.traces.RankTrace`).

Forwards are bounded, in this order of preference:

1. **annotations**: host ranges whose name matches ``forward_range`` (default ``ProfilerStep#N``, the
   range ``prof.step()`` writes), the outermost where matches nest (a glob such as ``*`` also matches the ranges
   inside a forward); a kernel belongs to the range whose host interval holds its launch call
   (matched by correlation id), or, in a trace without launch calls, whose GPU-side copy holds the kernel.
   Ranges with no attention kernel (decode steps, idle steps) are not prefill forwards and are left out.
   Within a forward, layers are the runs of attention kernels (below); when there are not ``num_layers``
   runs but the attention kernels divide evenly over ``num_layers``, they are cut in order into that many.
2. **the model's layer count**: without such ranges, the attention kernels are grouped into layers (a
   layer is a run of attention kernels that no other compute kernel interrupts; fills, copies, merges
   and collectives do not interrupt it), and every ``num_layers`` consecutive layers make one forward.

A forward's attention kernels per layer, with evidence that the rank ran context parallelism, decide the
verdict (:mod:`cpbench.studies.engine_traces.verdict`): 1 per layer is the fused path, 2 the two-call path (SGLang PR
#33137: 36 against 72 for a 36-layer model). Kernels are classified with cpbench's own patterns
(:func:`cpbench.profiles.kernels.classify`), given by the caller per backend.
"""

from __future__ import annotations

import bisect
import fnmatch
import statistics
from dataclasses import dataclass, field

from cpbench.studies.engine_traces.traces import Kernel, RankTrace, Span
from cpbench.profiles.kernels import classify

STEP_RANGE = "ProfilerStep#*"  # a glob (fnmatch, case-sensitive): the ranges prof.step() writes
NON_BREAKING = ("attention", "merge", "comm", "fill", "copy")  # kinds that do not end a layer's attention run


@dataclass
class EngineForward:
    """One prefill forward of one rank.

    Attributes:
        bound: ``"annotation"`` (a named range) or ``"layer count"``.
        name: the range's name, or ``"forward <i>"``.
        layers: per layer, its attention kernels (a layer = a run of attention kernels, see the module).
        kernels: every kernel of the forward, attention or not (0 when bounded by the layer count).
        all_gathers: its all-gather collective kernels (NCCL/RCCL ``AllGather``): one per layer is what CP's K|V
            all-gather launches. Bounded by the layer count, those after the previous forward's last attention kernel.
    """

    bound: str
    name: str
    layers: list[list[Kernel]]
    kernels: int = 0
    all_gathers: int = 0

    @property
    def attention_kernels(self) -> int:
        return sum(len(lay) for lay in self.layers)


@dataclass
class RankForwards:
    """What ``cpbench profile --from`` reports for one rank.

    Attributes:
        trace: the rank's trace.
        backend: the backend whose patterns matched the most attention kernels, or None; ``backends``: every
            backend seen, name -> attention kernels (two in one trace are said, not hidden).
        forwards: the prefill forwards found.
        kernel_kinds: kernels of the whole trace per class (:data:`cpbench.profiles.kernels.KINDS`).
        unknown: the kernels of class ``other`` (not attention, merge, collective, fill or copy: GEMMs,
            norms, the engine's own kernels), name -> count, so nothing is dropped silently; ``unknown_us`` their
            summed durations, name -> µs.
        leftover_layers: attention layers after the last whole forward (layer-count bounding only).
        ranges_without_attention: forward ranges matched but holding no attention kernel, when the forwards
            fell back to the layer count for that reason (0 otherwise).
        ranges_matched: host ranges ``forward_range`` matched; nested_ranges: those of them inside another match,
            left out (the outermost are the forwards).
    """

    trace: RankTrace
    backend: str | None
    forwards: list[EngineForward]
    kernel_kinds: dict[str, int] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    leftover_layers: int = 0
    backends: dict[str, int] = field(default_factory=dict)
    ranges_without_attention: int = 0
    unknown_us: dict[str, float] = field(default_factory=dict)
    ranges_matched: int = 0
    nested_ranges: int = 0

    def per_forward(self) -> list[int]:
        """Attention kernels in each forward."""
        return [f.attention_kernels for f in self.forwards]


def classify_backend(name: str, patterns: dict[str, tuple[str, ...]]) -> str | None:
    """The backend whose attention patterns match kernel ``name`` (the first in ``patterns``' order), or None."""
    for backend, pats in patterns.items():
        if classify(name, pats) == "attention":
            return backend
    return None


def find_forwards(trace: RankTrace, patterns: dict[str, tuple[str, ...]], num_layers: int,
                  forward_range: str = STEP_RANGE) -> RankForwards:
    """Find the prefill forwards of one rank and their attention kernels.

    Args:
        trace: one rank's trace.
        patterns: backend name -> lower-case substrings of its attention kernels' names (the backend
            registry's ``kernel_patterns``).
        num_layers: attention layers per forward (the model's), for bounding without annotations.
        forward_range: a glob a forward's host range name must match in full (``ProfilerStep#*``).
    Returns:
        the rank's forwards (possibly none: the caller says so).
    Raises:
        ValueError: ``num_layers`` < 1, or ``forward_range`` is empty.
    """
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    ranges = matching_ranges(trace, forward_range)
    matched = len(ranges)
    ranges = outermost(ranges)
    all_pats = tuple(p for pats in patterns.values() for p in pats)
    kinds = [classify(k.name, all_pats) for k in trace.kernels]
    out = RankForwards(trace, None, [], ranges_matched=matched, nested_ranges=matched - len(ranges))
    by_backend: dict[str, int] = {}
    for k, kind in zip(trace.kernels, kinds):
        out.kernel_kinds[kind] = out.kernel_kinds.get(kind, 0) + 1
        if kind == "attention":
            b = classify_backend(k.name, patterns)
            by_backend[b] = by_backend.get(b, 0) + 1
        elif kind == "other":
            out.unknown[k.name] = out.unknown.get(k.name, 0) + 1
            out.unknown_us[k.name] = out.unknown_us.get(k.name, 0.0) + k.dur
    out.backends = dict(sorted(by_backend.items(), key=lambda kv: -kv[1]))
    out.backend = next(iter(out.backends), None)
    if ranges:
        out.forwards = _by_ranges(trace, kinds, ranges, num_layers)
    if not out.forwards:  # no range, or ranges that hold no attention kernel: the model's layer count
        out.forwards, out.leftover_layers = _by_layer_count(_layers(trace.kernels, kinds), num_layers)
        _count_all_gathers(out.forwards, [k.ts for k, kind in zip(trace.kernels, kinds) if is_all_gather(k.name, kind)])
        out.ranges_without_attention = len(ranges)
    return out


def is_all_gather(name: str, kind: str) -> bool:
    """A collective kernel that all-gathers: ``ncclDevKernel_AllGather_RING_LL(...)``, ``ncclKernel_AllGather_...``."""
    return kind == "comm" and "allgather" in name.lower()


def _count_all_gathers(forwards: list[EngineForward], starts: list[float]) -> None:
    """Set each layer-count forward's ``all_gathers``: those starting after the previous forward's last attention
    kernel and before its own last one (CP gathers a layer's K|V before the layer's attention)."""
    lo = float("-inf")
    for f in forwards:
        hi = f.layers[-1][-1].ts
        f.all_gathers = sum(lo < t <= hi for t in starts)
        lo = hi


def _layers(kernels: list[Kernel], kinds: list[str]) -> list[list[Kernel]]:
    """Runs of attention kernels not interrupted by an ``other`` kernel, in GPU start order."""
    layers: list[list[Kernel]] = []
    run: list[Kernel] = []
    for k, kind in zip(kernels, kinds):
        if kind == "attention":
            run.append(k)
        elif kind not in NON_BREAKING and run:
            layers.append(run)
            run = []
    if run:
        layers.append(run)
    return layers


def _by_layer_count(layers: list[list[Kernel]], num_layers: int) -> tuple[list[EngineForward], int]:
    whole = len(layers) // num_layers
    forwards = [EngineForward("layer count", f"forward {i}", layers[i * num_layers:(i + 1) * num_layers])
                for i in range(whole)]
    return forwards, len(layers) - whole * num_layers


def range_members(trace: RankTrace, ranges: list[Span]) -> list[list[int]]:
    """For each of ``ranges`` (host ranges, sorted by start, not overlapping one another: ``ProfilerStep#N``
    follow one another), the indices in ``trace.kernels`` of the kernels it launched: by the launch call's
    host time (correlation id), or, for a kernel without a launch call, by the range's GPU-side copy (same
    name, same occurrence) holding the kernel's start. Each kernel is placed by bisection."""
    starts = [r.ts for r in ranges]
    names = {r.name for r in ranges}
    gpu = sorted((g for g in trace.gpu_ranges if g.name in names), key=lambda g: g.ts)
    gpu_starts = [g.ts for g in gpu]
    gpu_index = _nth_same_name(ranges, gpu)  # the GPU copy of a name's n-th host range is its n-th GPU range
    members: list[list[int]] = [[] for _ in ranges]
    for i, k in enumerate(trace.kernels):
        t = trace.launches.get(k.correlation) if k.correlation is not None else None
        if t is not None:
            j = bisect.bisect_right(starts, t) - 1
            if j >= 0 and t <= ranges[j].end:
                members[j].append(i)
        elif gpu:
            j = bisect.bisect_right(gpu_starts, k.ts) - 1
            if j >= 0 and k.ts <= gpu[j].end and gpu_index[j] is not None:
                members[gpu_index[j]].append(i)
    return members


def outermost(ranges: list[Span]) -> list[Span]:
    """``ranges`` (sorted by start) without those that lie inside another of them: a glob that matches a forward and
    the ranges within it (``*``) keeps the forward."""
    out: list[Span] = []
    reach = float("-inf")  # the latest end of a kept range: every kept range starts at or before the next one
    for r in sorted(ranges, key=lambda r: (r.ts, -r.end)):
        if r.end <= reach:
            continue
        out.append(r)
        reach = r.end
    return out


def matching_ranges(trace: RankTrace, forward_range: str = STEP_RANGE) -> list[Span]:
    """The host ranges whose whole name matches the glob ``forward_range`` (``*``, ``?``, ``[...]``; case
    matters), by start time. A glob, not a regular expression: matching is linear in the name, so no pattern can
    stall on a long range name. Raises ValueError for an empty pattern."""
    if not forward_range:
        raise ValueError("the forward range is empty: give a range name or a glob such as 'ProfilerStep#*'")
    return sorted((r for r in trace.host_ranges if fnmatch.fnmatchcase(r.name, forward_range)), key=lambda r: r.ts)


def _by_ranges(trace: RankTrace, kinds: list[str], ranges: list[Span], num_layers: int) -> list[EngineForward]:
    """Each range's kernels split into layers; ranges without an attention kernel left out."""
    forwards = []
    for r, idx in zip(ranges, range_members(trace, ranges)):
        layers = _split_layers(_layers([trace.kernels[i] for i in idx], [kinds[i] for i in idx]), num_layers)
        if layers:
            gathers = sum(is_all_gather(trace.kernels[i].name, kinds[i]) for i in idx)
            forwards.append(EngineForward("annotation", r.name, layers, len(idx), gathers))
    return forwards


def _split_layers(runs: list[list[Kernel]], num_layers: int) -> list[list[Kernel]]:
    """``runs`` as layers: unchanged when there are ``num_layers`` of them; otherwise, when the attention kernels
    divide evenly over ``num_layers``, cut in order into that many equal layers (a forward whose layers run
    nothing but attention, such as cpbench's own, has no other kernel between them); else unchanged."""
    flat = [k for run in runs for k in run]
    if len(runs) == num_layers or not flat or len(flat) % num_layers:
        return runs
    per = len(flat) // num_layers
    return [flat[i * per:(i + 1) * per] for i in range(num_layers)]


def _nth_same_name(host: list[Span], gpu: list[Span]) -> list[int | None]:
    """For each GPU range, the index in ``host`` of the host range it copies (same name, same rank of
    occurrence), or None."""
    index, seen = {}, {}
    for j, r in enumerate(host):
        n = seen[r.name] = seen.get(r.name, -1) + 1
        index[(r.name, n)] = j
    out, seen = [], {}
    for g in gpu:
        n = seen[g.name] = seen.get(g.name, -1) + 1
        out.append(index.get((g.name, n)))
    return out


@dataclass(frozen=True)
class LayerTimes:
    """Per-layer attention kernel time of one layer kind over every forward of a rank, µs.

    ``layers`` is how many layers the statistics cover; ``median``/``p10``/``p90`` their sums of attention
    kernel durations per layer (a layer's kernels run one after another, so the sum is its GPU time).
    """

    kind: str
    layers: int
    median: float
    p10: float
    p90: float


def layer_times(forwards: list[EngineForward], window_left_per_layer: list[int] | None = None) -> list[LayerTimes]:
    """Per-layer attention time by layer kind (``window``/``full`` from ``window_left_per_layer``, one entry
    per layer, -1 full; ``all`` when no list is given or a forward's layer count differs from it).

    Returns:
        one LayerTimes per kind present, window first; empty without forwards.
    """
    per_kind: dict[str, list[float]] = {}
    for f in forwards:
        known = window_left_per_layer is not None and len(window_left_per_layer) == len(f.layers)
        for i, lay in enumerate(f.layers):
            kind = ("window" if window_left_per_layer[i] >= 0 else "full") if known else "all"
            per_kind.setdefault(kind, []).append(sum(k.dur for k in lay))
    out = []
    for kind in ("window", "full", "all"):
        xs = per_kind.get(kind)
        if xs:
            q = statistics.quantiles(xs, n=10, method="inclusive") if len(xs) > 1 else [xs[0]] * 9
            out.append(LayerTimes(kind, len(xs), statistics.median(xs), q[0], q[-1]))
    return out
