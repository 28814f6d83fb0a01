"""A cell's rest-of-layer work for the breakable forward: the weights and activations of every layer's work
besides attention (:mod:`.layer_rest`), built once per cell and shared by its ranks, modes and backends, with the
CUDA-graph segments captured from it (:func:`cpbench.studies.breakable.layers.breakable_layers`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from cpbench.domain.layer_rest import graph_bucket, rest_shape
from cpbench.domain.models import ModelSpec
from cpbench.domain.modes import Status, Timing
from cpbench.measure.method import Unavailable
from cpbench.studies.breakable.layer_rest import AllToAll, LayerRest, SpinRest


@dataclass
class CellRest:
    """One cell's rest-of-layer work, shared by its ranks, modes and backends.

    Attributes:
        work: a :class:`LayerRest` or :class:`SpinRest` (``before_attention(i)`` / ``after_attention(i)``).
        graphs: replay the segments as CUDA graphs (False: eager, for the reason in ``columns["segments"]``).
        columns: the row columns every breakable row of the cell carries (segments, graph_bucket,
            bucket_pad_ratio, rest_flops, rest_weight_bytes, rest_weights_note, ep_size, layer_rest).
        segments: ``(layer, step names) -> replay`` of the segments captured so far (:func:`breakable_layers`);
            their graphs live until :meth:`release`.
    """

    work: LayerRest | SpinRest
    graphs: bool
    columns: dict
    segments: dict = field(default_factory=dict)
    _graphs: list = field(default_factory=list)

    def release(self) -> None:
        """Reset the graphs of :attr:`segments` (the cell is done with them)."""
        self.segments.clear()
        while self._graphs:
            self._graphs.pop().reset()


def build_layer_rest(model: ModelSpec, tokens_padded: int, cp_size: int, *, tp_size: int, ep: int | None,
                     layer_rest_us: float | None, buckets: tuple[int, ...], device: torch.device,
                     dtype: torch.dtype, seed: int, a2a: AllToAll | None = None) -> CellRest:
    """The rest of every layer of one cell, on ``tokens_padded`` rows per rank (every rank of a cell pads to
    the same count) or the bucket they pad to (:func:`cpbench.domain.layer_rest.graph_bucket`). ``a2a``: the
    all-to-all of a torchrun launch's CP group (the MoE dispatch and combine), None for simulated ranks.

    Raises:
        Unavailable: ``skipped`` when the weights and activations would not fit in free device memory (the
            reason gives the bytes needed), ``oom`` when allocating them failed anyway.
        CpbenchInputError: the model lacks the fields to build its layer (spec.layer_rest.rest_shape).
    """
    rows, how = graph_bucket(tokens_padded, buckets)
    if device.type != "cuda":
        how = "eager: CPU (no CUDA graphs)"
    cols = dict(segments=how, graph_bucket=rows, bucket_pad_ratio=rows / tokens_padded if tokens_padded else math.nan,
                rest_weights_note="", ep_size=0)
    if layer_rest_us is not None:
        work = SpinRest(layer_rest_us, device)
        cols.update(layer_rest=f"{layer_rest_us:g} us", rest_flops=0.0, rest_weight_bytes=0.0, moe_a2a_bytes=0)
        return CellRest(work, how == Timing.GRAPH, cols)
    shape = rest_shape(model, rows, cp_size, tp_size, ep)
    elem = torch.tensor([], dtype=dtype).element_size()
    need = shape.weight_bytes(elem) + shape.activation_bytes(elem)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if need > 0.9 * free:
            raise Unavailable(Status.SKIPPED, f"the rest of the layer needs about {need / 2**30:.1f} GiB (one "
                                                  f"layer's weights and activations at {rows} tokens), "
                                                  f"{free / 2**30:.1f} GiB free")
    try:
        work = LayerRest(shape, model.num_layers, device, dtype, seed, a2a)
    except (torch.OutOfMemoryError, MemoryError) as e:
        raise Unavailable(Status.OOM, f"out of memory building the rest of the layer ({need / 2**30:.1f} "
                                          f"GiB per layer): {str(e).splitlines()[0]}") from e
    ep_size = shape.num_experts // shape.local_experts if shape.is_moe else 0
    cols.update(layer_rest="model", rest_flops=float(shape.flops * model.num_layers),
                rest_weight_bytes=float(work.weight_bytes), rest_weights_note=model.weights_note, ep_size=ep_size,
                moe_a2a_bytes=work.a2a_bytes)
    return CellRest(work, how == Timing.GRAPH, cols)
