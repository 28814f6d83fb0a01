"""An engine's per-layer attention kernel time beside cpbench's cell (``cpbench profile --from --cell``).

cpbench's per-layer time of a layer kind is ``window_layers_us`` / ``full_layers_us`` of the cell's eager
row (GPU busy time of the work each layer launches in the profiled forward: the attention kernels, and
FMHAv2's memset) divided by that kind's layer count. The engine's is the median over its forwards of the
sum of one layer's attention kernel durations (:func:`cpbench.studies.engine_traces.forwards.layer_times`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cpbench.domain.modes import Mode, Timing, Status
from cpbench.studies.engine_traces.forwards import LayerTimes

KIND_COLUMN = {"window": "window_layers_us", "full": "full_layers_us"}


@dataclass(frozen=True)
class LayerComparison:
    """One rank and layer kind: the engine's per-layer attention time (median, p10, p90; µs) against
    cpbench's (µs; NaN when its row has none), and their ratio engine / cpbench."""

    rank: int
    kind: str
    engine_median_us: float
    engine_p10_us: float
    engine_p90_us: float
    cpbench_us: float

    @property
    def ratio(self) -> float:
        ok = self.cpbench_us > 0 and not math.isnan(self.cpbench_us)
        return self.engine_median_us / self.cpbench_us if ok else math.nan


def cpbench_layer_us(rows, *, cp_size: int, bs: int, max_extend_len: int, backend: str, mode: str,
                     window_left_per_layer: list[int]) -> dict[int, dict[str, float]]:
    """cpbench's per-layer time of each layer kind, per rank, µs: ``{rank: {"window": µs, "full": µs}}``.

    Args:
        rows: a run's rows (``cpbench.Run.rows``).
        cp_size, bs, max_extend_len: the cell (tokens); backend, mode: as the engine's trace showed them.
        window_left_per_layer: the model's, one entry per layer (-1 full).
    Returns:
        the ranks with an ``ok`` eager row of that cell; a kind without a per-layer time (CPU rows, one
        layer kind) is NaN.
    """
    mode = Mode(mode).value  # ValueError for a name that is no mode
    need = {"cp_size": cp_size, "bs": bs, "max_extend_len": max_extend_len, "backend": backend, "mode": mode,
            "timing": Timing.EAGER.value, "status": Status.OK.value}
    sel = rows
    for col, v in need.items():
        if col not in sel:
            return {}
        sel = sel[sel[col] == v]
    counts = {"window": sum(w >= 0 for w in window_left_per_layer), "full": sum(w < 0 for w in window_left_per_layer)}
    out: dict[int, dict[str, float]] = {}
    for _, r in sel.iterrows():
        out[int(r["rank"])] = {kind: (float(r[col]) / counts[kind] if col in r and counts[kind] and r[col] == r[col]
                                      else math.nan) for kind, col in KIND_COLUMN.items()}
    return out


def compare_layers(engine: dict[int, list[LayerTimes]], cpbench: dict[int, dict[str, float]]) -> list[LayerComparison]:
    """Engine against cpbench per rank and layer kind (the engine's ranks, in order; cpbench NaN where it has
    no such rank or kind)."""
    out = []
    for rank in sorted(engine):
        for t in engine[rank]:
            out.append(LayerComparison(rank, t.kind, t.median, t.p10, t.p90,
                                       cpbench.get(rank, {}).get(t.kind, math.nan)))
    return out
