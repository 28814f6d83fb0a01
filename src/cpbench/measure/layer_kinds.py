"""Per-layer-kind times of one forward: how much of a forward the sliding-window layers and the
full-attention layers take, so fused vs two-call can be compared by layer kind (GPT-OSS alternates a
128-token window with full attention).

The per-layer times come from the profiled eager forward that counts kernels
(:func:`cpbench.measure.kernel_counts.count_kernels`), so they cost no forward of their own: a layer's
time is the GPU busy time of the work launched inside its ``layer{i}`` range (every step of the layer:
attention, and in a torchrun launch the gather and KV write). CUDA only: on CPU the profiled forward's
host times include the profiler's own cost, so the columns are left out there.
"""

from __future__ import annotations

from typing import Mapping, Sequence

KIND_COLUMNS = {"window": "window_layers_us", "full": "full_layers_us"}


def has_both_kinds(window_left_per_layer: Sequence[int]) -> bool:
    """True when the model has sliding-window (``window_left >= 0``) and full (``-1``) layers."""
    return len({w >= 0 for w in window_left_per_layer}) == 2


def layer_kind_sums(layer_us: Mapping[int, float], window_left_per_layer: Sequence[int]) -> dict[str, float]:
    """The window layers' and the full layers' times, each summed over its layers, µs:
    ``{"window_layers_us", "full_layers_us"}``.

    Args:
        layer_us: ``layer index -> µs`` of one forward (``KernelCounts.layer_us``).
        window_left_per_layer: one entry per layer of the forward (``-1``: full).
    Raises:
        ValueError: ``layer_us`` does not hold exactly the layers ``0 .. len(window_left_per_layer) - 1``
            (a profile that lost or gained a layer range must not give a partial sum).
    """
    if sorted(layer_us) != list(range(len(window_left_per_layer))):
        raise ValueError(f"per-layer times for {len(layer_us)} layers, the model has {len(window_left_per_layer)}")
    sums = {col: 0.0 for col in KIND_COLUMNS.values()}
    for i, w in enumerate(window_left_per_layer):
        sums[KIND_COLUMNS["window" if w >= 0 else "full"]] += float(layer_us[i])
    return sums
