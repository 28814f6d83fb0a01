"""FLOPs of one rank's forward (no torch): the per-segment causal areas of every layer's calls."""

from __future__ import annotations

from cpbench.domain.modes import Mode
from cpbench.domain.geometry import RankGeometry, attention_flops
from cpbench.domain.models import ModelSpec


def forward_flops(model: ModelSpec, geometry: RankGeometry) -> int:
    """FLOPs of one forward of one rank: for every layer, :func:`~cpbench.domain.geometry.attention_flops`
    (``4 * Hq * D * attended pairs``, docs/design.md §4) of the fused call's segments with the layer's
    ``window_left``. Two-call and fused attend the same pairs, so this is both modes' work. A cached prefix
    adds keys, not queries: each extend token attends the prefix too. ``model`` holds one GPU's heads
    (at TP > 1 the per-GPU ``num_q_heads``). Raises CpbenchInputError for an ineligible rank."""
    calls = geometry.calls(Mode.FUSED)
    return sum(attention_flops(segs, model.num_q_heads, model.head_dim, w)
               for w in model.window_left_per_layer for _, segs in calls)
