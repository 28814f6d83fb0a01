"""Per-layer-kind times of one forward: how much of a forward the sliding-window layers and the
full-attention layers take, so fused vs two-call can be compared by layer kind (GPT-OSS alternates a
128-token window with full attention)."""

from __future__ import annotations

from typing import Callable, Sequence

from cpbench.bench.backends.base import Prepared
from cpbench.bench.phases import median_sums, span_times_us

KIND_COLUMNS = {"window": "window_layers_us", "full": "full_layers_us"}


def has_both_kinds(window_left_per_layer: Sequence[int]) -> bool:
    """True when the model has sliding-window (``window_left >= 0``) and full (``-1``) layers."""
    return len({w >= 0 for w in window_left_per_layer}) == 2


def layer_kind_times_us(prep: Prepared, window_left_per_layer: Sequence[int], clock,
                        barrier: Callable[[], None] | None = None, reps: int | None = None) -> dict:
    """Median over ``reps`` eager forwards (default 1: a breakdown of the timed latency, not a second
    latency, so it costs the sweep one extra forward per rank and mode) of the time the window layers and
    the full layers take, each summed over its layers, µs: ``{"window_layers_us", "full_layers_us"}``.

    On CUDA one event is recorded before the forward and one after each layer (no host sync inside the
    forward), so a layer's time is the device time from the end of the previous layer to its own end,
    every step of the layer included (attention, and in a torchrun launch the gather and KV write). On
    CPU ``time.perf_counter`` brackets each layer. ``window_left_per_layer`` has one entry per layer of
    ``prep`` (``-1``: full). Raises ValueError when the lengths differ.
    """
    if len(window_left_per_layer) != len(prep.layers):
        raise ValueError(f"{len(window_left_per_layer)} window_left values for {len(prep.layers)} layers")
    reps = reps if reps is not None else 1
    kinds = ["window" if w >= 0 else "full" for w in window_left_per_layer]
    per_rep = []
    for _ in range(reps):
        sums = {col: 0.0 for col in KIND_COLUMNS.values()}
        for kind, us in zip(kinds, span_times_us(prep.layers, clock, barrier)):
            sums[KIND_COLUMNS[kind]] += us
        per_rep.append(sums)
    return median_sums(per_rep)
