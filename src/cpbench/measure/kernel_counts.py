"""Kernel-count columns of one profiled eager forward (torch.profiler, through profiles.capture), checked
against ``layers x attention calls per layer x kernels per call``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch

from cpbench.kernels.backends.base import Prepared
from cpbench.measure.layer_kinds import has_both_kinds, layer_kind_sums

COUNT_COLUMNS = ("attn_kernels", "attn_calls", "comm_kernels", "merge_kernels", "fill_kernels", "copy_kernels",
                 "other_kernels", "kernels", "launches", "gpu_busy_us")


def count_kernels(prep: Prepared, label: str, device: torch.device, trace_dir: Path | None = None,
                  per_call_cache: dict | None = None, per_call_key=None,
                  window_left_per_layer: Sequence[int] | None = None) -> dict:
    """Kernel-count columns of one eager forward (profiles.capture), checked against
    ``layers x attention calls per layer x kernels per call`` where kernels can be told apart by name.

    ``attn_kernels`` is GPU attention-kernel executions, or for the torch reference (no single
    attention kernel) the attention calls; collective kernels (``comm_kernels``) are counted apart.
    With ``window_left_per_layer`` (one entry per layer, ``-1`` full) of a model with both layer kinds,
    the same profiled forward also gives ``window_layers_us`` / ``full_layers_us`` (measure.layer_kinds) on
    CUDA, from the kernels' GPU time; not on CPU, where a profiled forward's host times carry the
    profiler's own cost (2-3x a forward's latency). On CUDA the profiler's warm-up step (it absorbs the
    profiler's start-up) is one attention call for an attention-only forward, a whole forward otherwise.
    Raises ProfileError when zero attention work is seen, RuntimeError when the count differs from
    the expectation.
    """
    from cpbench.profiles.capture import expected_for, kernels_per_call, profile_prepared

    slug = label.replace(" ", "_")
    trace = trace_dir / f"{slug}.json.gz" if trace_dir is not None else None
    cuda = device.type == "cuda"
    # the profiler's warm-up step: one attention call for an attention-only forward (checked on the H200); a
    # forward with communication steps (torchrun) keeps a whole forward, as it was checked on 2 GPUs
    attention_only = all(s.kind == "attention" for layer in prep.layers for s in layer)
    c = profile_prepared(prep, f"{label} eager", device, trace_path=trace,
                         steps_warmup=1 if cuda else 0,  # CPU: nothing to miss
                         warmup_fn=prep.first_attention_call() if cuda and attention_only else None)
    by_kernel = device.type == "cuda" and bool(prep.kernel_patterns)
    row = {"attn_kernels": c.attention if by_kernel else c.attention_calls, "attn_calls": c.attention_calls,
           "comm_kernels": c.comm, "gpu_busy_us": c.gpu_busy_us if device.type == "cuda" else math.nan,
           "merge_kernels": c.merge, "fill_kernels": c.fill, "copy_kernels": c.copy,
           "other_kernels": c.other + c.merge + c.fill + c.copy, "kernels": c.kernels, "launches": c.launches}
    per_call = (per_call_cache or {}).get(per_call_key)
    if per_call is None:
        per_call = kernels_per_call(prep.first_attention_call(), prep.kernel_patterns, device) if by_kernel else 1
        if per_call_cache is not None:
            per_call_cache[per_call_key] = per_call
    row["kernels_per_call"] = per_call
    row["attn_kernels_expected"] = expected_for(prep, per_call)
    if row["attn_kernels"] != row["attn_kernels_expected"]:
        raise RuntimeError(f"counted {row['attn_kernels']} attention kernels, expected "
                           f"{row['attn_kernels_expected']} (layers x calls x kernels/call)")
    if cuda and window_left_per_layer is not None and has_both_kinds(window_left_per_layer):
        try:
            row.update(layer_kind_sums(c.layer_us, window_left_per_layer))
        except ValueError:  # extra columns: a trace without every layer range leaves them out, not the row
            pass
    if trace is not None:
        row["trace"] = str(trace)
    return row
