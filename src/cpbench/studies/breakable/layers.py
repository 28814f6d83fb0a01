"""The breakable forward's layers: a prefill forward as SGLang runs it under breakable prefill CUDA graphs
(``--cuda-graph-backend-prefill breakable``; docs/design.md §11).

Per layer: a graph segment replays the layer's work before attention (norm, QKV projection, RoPE), the
attention steps launch eagerly through the backend's prepared closures (two calls or the fused call; in a
torchrun launch the K|V gather and KV write too), then a graph segment replays the work after attention (O
projection, norm, MLP or MoE). Consecutive ``layer`` steps form one segment; every other step is eager.
The segments read only the rest's own buffers (its stand-in of the attention output, not the backend's), so a
layer's segments are the same work for every rank, mode and backend of a cell: they are captured once per cell
(:attr:`~cpbench.studies.breakable.rest.CellRest.segments`), outside the timed region, and replayed by all of
them. On a CPU, or for a token count SGLang would not replay (``--graph-buckets``), the segments run eagerly.

:func:`breakable_layers` turns a prepared forward into per-layer callables; :func:`layer_kind_us` times the
window and full layers apart (CUDA events after every layer, a separate pass: events inside the timed
samples would add host work to the forward they measure); :func:`time_layer_kinds` estimates the forward from
one layer of each kind (``--forward-layers kinds``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from cpbench.kernels.backends.base import Prepared, Step
from cpbench.measure.layer_kinds import has_both_kinds, layer_kind_sums
from cpbench.measure.phases import span_times_us
from cpbench.measure.timing import Clock, capture_segments, ci_rel_width
from cpbench.studies.breakable.rest import CellRest

Fn = Callable[[], None]
KIND_PASS_REPS = 3  # forwards timed layer by layer for the per-layer-kind split


def breakable_layers(prep: Prepared, rest: CellRest, capture: Collection[int] | None = None) -> list[list[Fn]]:
    """Per layer, the callables of one breakable forward: ``prep`` with the rest of each layer around its
    steps, consecutive ``layer`` steps one CUDA graph segment (when ``rest.graphs``), every other step
    (attention, gather, KV write) its own eager closure. ``capture``: the layers whose segments replay as graphs
    (None: all; ``--forward-layers kinds`` runs only :func:`kind_rotation`'s), the others' run eagerly. A segment
    the cell captured already (another rank, mode or backend) is replayed, not captured again.
    Raises what capture raises."""
    full = prep.with_layer_work(rest.work.before_attention, rest.work.after_steps)
    plan: list[list[tuple[bool, list[Step]]]] = []  # per layer: (is a segment, its steps)
    for steps in full.layers:
        groups: list[tuple[bool, list[Step]]] = []
        for step in steps:
            seg = step.kind == "layer"
            if groups and groups[-1][0] and seg:
                groups[-1][1].append(step)
            else:
                groups.append((seg, [step]))
        plan.append(groups)
    if not rest.graphs:
        return [[s.fn for _, steps in groups for s in steps] for groups in plan]
    take = set(range(len(plan)) if capture is None else capture)

    def key(i: int, steps: list[Step]) -> tuple:
        return i, tuple(s.name for s in steps)

    new = {key(i, steps): _chain([s.fn for s in steps]) for i, groups in enumerate(plan) if i in take
           for seg, steps in groups if seg and key(i, steps) not in rest.segments}
    rest.segments.update(zip(new, capture_segments(list(new.values()), owner=rest._graphs)))
    return [[f for seg, steps in groups
             for f in ([rest.segments[key(i, steps)]] if seg and i in take else [s.fn for s in steps])]
            for i, groups in enumerate(plan)]


def _chain(fns: list[Fn]) -> Fn:
    if len(fns) == 1:
        return fns[0]

    def run() -> None:
        for f in fns:
            f()
    return run


def run_layers(layers: list[list[Fn]]) -> None:
    """Launch one breakable forward (every layer's callables in order)."""
    for fns in layers:
        for f in fns:
            f()


def layer_kind_us(layers: list[list[Fn]], clock: Clock, window_left_per_layer: Sequence[int],
                  reps: int = KIND_PASS_REPS, barrier: Fn | None = None) -> dict[str, float]:
    """The window layers' and the full layers' time in a breakable forward, µs (``window_layers_us``,
    ``full_layers_us``): ``reps`` forwards with a CUDA event after every layer (perf_counter on CPU), each
    layer's median over the forwards, summed by kind (:func:`cpbench.measure.layer_kinds.layer_kind_sums`).
    Empty for a model with one layer kind (its critical path needs no split)."""
    if not has_both_kinds(window_left_per_layer):
        return {}
    chunks = [[Step("", f) for f in fns] for fns in layers]  # one chunk per layer (phases.span_times_us)
    runs = [span_times_us(chunks, clock, barrier) for _ in range(reps)]  # reps x [layers] µs
    return layer_kind_sums({i: statistics.median(r[i] for r in runs) for i in range(len(layers))},
                           window_left_per_layer)


KIND_ROTATION = 2  # the layers of a kind that its one-layer samples rotate over (the last ones, in model order)


def kind_layers(window_left_per_layer: Sequence[int]) -> dict[int, list[int]]:
    """``window_left -> the indices of the layers of that kind``, in model order (``-1``: full layers)."""
    out: dict[int, list[int]] = {}
    for i, w in enumerate(window_left_per_layer):
        out.setdefault(w, []).append(i)
    return out


def kind_rotation(window_left_per_layer: Sequence[int], rotation: int = KIND_ROTATION) -> dict[int, list[int]]:
    """``window_left -> the last min(rotation, n_kind) layers of that kind`` (model order): the layers
    :func:`time_layer_kinds` runs, the only ones whose segments a ``kinds`` sweep captures. The last layer of each
    kind is among them, so what a whole forward leaves in the outputs can be restored."""
    return {w: idx[-rotation:] for w, idx in kind_layers(window_left_per_layer).items()}


def _rotating(layers: list[list[Fn]], idx: list[int]) -> Fn:
    """A callable that runs one layer of ``idx`` (one kind) and the next one of ``idx`` at its next call, wrapping:
    successive samples read other layers' weights and KV caches."""
    at = [0]

    def run() -> None:
        for f in layers[idx[at[0]]]:
            f()
        at[0] = (at[0] + 1) % len(idx)

    return run


@dataclass
class KindSamples:
    """What :func:`time_layer_kinds` measured for one mode.

    Attributes:
        forward_us: per sample i, the forward it estimates, µs: ``sum over kinds of n_kind x`` sample i of that kind.
        columns: ``window_layers_us``/``full_layers_us`` (their share of the estimate, from the kinds' medians; a
            model with both kinds), ``forward_rule`` ("kinds"), ``kind_layers_per_sample`` (e.g.
            ``"window 127: 1 of 18, full: 1 of 18"``).
        stop: the timing info of the row (stop reason, host issue time per sample scaled like the samples,
            ``host_launch_us`` their median, the SM clock range, ``ci_rel_width`` of ``forward_us``).
    """

    forward_us: list[float]
    columns: dict
    stop: dict


def kinds_text(kinds: dict[int, list[int]], per_sample: dict[int, int]) -> str:
    """``"window 127: 1 of 18, full: 1 of 18"``: layers per sample of each kind, of the kind's layers."""
    return ", ".join(f"{'full' if w < 0 else f'window {w}'}: {per_sample[w]} of {len(kinds[w])}"
                     for w in sorted(kinds, reverse=True))


def time_layer_kinds(layer_fns: dict[str, list[list[Fn]]], clock: Clock, window_left_per_layer: Sequence[int],
                     timer: Callable[..., dict[str, list[float]]], info: dict,
                     rotation: int = KIND_ROTATION) -> dict[str, KindSamples]:
    """The breakable forward of each mode estimated from one layer of each kind (``--forward-layers kinds``).

    Every layer of a kind is the same work, so per mode and kind a variant runs one layer of that kind (its own
    segments and eager attention), rotating over the kind's last ``rotation`` layers (:func:`kind_rotation`: other
    weights and KV caches from sample to sample), and the forward is ``sum over kinds of n_kind x t_kind``.
    ``timer`` times the variants (mode x kind) the way a forward runs its layers, back to back without a sync
    (:func:`cpbench.studies.breakable.stream.time_stream`, called as ``timer(fns, info=..., budget_share=..., forward_ci=...)``:
    each kind gets its share of a variant's budget, as one forward sample costs one layer of each kind, and the
    precision stop reads the widest relative CI of the modes' forward estimates), so a sample is a layer's time
    in a forward's steady state, host issue hidden or not as it would be there; samples of each kind pair up by
    index: sample i of the forward is the scaled sum of sample i of each kind. Finally the last layer of each kind
    runs once more, so the outputs hold what a whole forward leaves there.

    Args:
        layer_fns: ``mode -> per layer, its callables`` (:func:`breakable_layers`; only the layers of
            :func:`kind_rotation` are run).
        info: filled by ``timer`` per variant (``"<mode>|<window_left>"``); read here.
    Returns:
        ``mode -> KindSamples``.
    Raises:
        what the layers' callables or ``timer`` raise (an OOM, a failed replay); the caller turns it into the
        rows' status. Simulated ranks only: real ranks time whole forwards (their layers wait on collectives).
    """
    kinds = kind_layers(window_left_per_layer)
    rot = kind_rotation(window_left_per_layer, rotation)
    fns = {f"{m}|{w}": _rotating(layers, rot[w]) for m, layers in layer_fns.items() for w in kinds}
    scale = {w: float(len(kinds[w])) for w in kinds}

    def forwards(samples: dict[str, list[float]], m: str) -> list[float]:  # sample i: the scaled sum of the kinds'
        n = min(len(samples[f"{m}|{w}"]) for w in kinds)
        return [sum(scale[w] * samples[f"{m}|{w}"][i] for w in kinds) for i in range(n)]

    samples = timer(fns, info=info, budget_share=1 / len(kinds),
                    forward_ci=lambda s: max(ci_rel_width(forwards(s, m)) for m in layer_fns))
    for layers in layer_fns.values():  # the outputs a whole forward leaves: each kind's last layer ran last
        for idx in kinds.values():
            for f in layers[idx[-1]]:
                f()
    clock.sync()
    out = {}
    for m in layer_fns:
        forward = forwards(samples, m)
        per_kind = {w: scale[w] * statistics.median(samples[f"{m}|{w}"]) for w in kinds}
        cols: dict = {"forward_rule": "kinds", "kind_layers_per_sample": kinds_text(kinds, dict.fromkeys(kinds, 1))}
        if has_both_kinds(window_left_per_layer):
            cols["window_layers_us"] = sum(v for w, v in per_kind.items() if w >= 0)
            cols["full_layers_us"] = sum(v for w, v in per_kind.items() if w < 0)
        out[m] = KindSamples(forward, cols, _kind_stop(info, m, kinds, _kind_host(info, m, kinds, scale), forward))
    return out


def _kind_host(info: dict, mode: str, kinds: dict[int, list[int]], scale: dict[int, float]) -> list[float]:
    """Per sample, the host's issue time of the forward: each kind's issue time scaled like its samples, summed
    (empty on a CPU, where issuing is executing)."""
    host = [info.get(f"{mode}|{w}", {}).get("host_samples_us", []) for w in kinds]
    n = min((len(h) for h in host), default=0)
    return [sum(scale[w] * h[i] for w, h in zip(kinds, host)) for i in range(n)]


def _kind_stop(info: dict, mode: str, kinds: dict[int, list[int]], host_fwd: list[float],
               forward: list[float]) -> dict:
    """The timing info of a mode's row from its kinds' variants: the host's issue time of each forward sample
    (:func:`_kind_host`; the host-hidden test compares it with the forward, i.e. each layer's issue time with its
    GPU time)."""
    parts = [info.get(f"{mode}|{w}", {}) for w in kinds]
    out = {"stop_reason": next((p["stop_reason"] for p in parts if "stop_reason" in p), ""),
           "ci_rel_width": ci_rel_width(forward),
           "host_launch_us": statistics.median(host_fwd) if host_fwd else math.nan,
           "host_samples_us": [round(x, 3) for x in host_fwd]}
    for key, pick in (("sm_clock_mhz_min", min), ("sm_clock_mhz_max", max)):
        vals = [p[key] for p in parts if key in p and p[key] == p[key]]
        out[key] = pick(vals) if vals else math.nan
    return out
