"""Attention tensor parallelism: the heads one GPU holds at ``tp_size`` (no torch).

SGLang and vLLM shard attention by heads: each of the ``tp_size`` GPUs holds ``num_q_heads / tp_size``
query heads and ``num_kv_heads / tp_size`` KV heads; when there are fewer KV heads than GPUs, every KV
head is replicated on ``tp_size / num_kv_heads`` GPUs, so each GPU holds one (vLLM
``QKVParallelLinear``: ``num_kv_head_replicas = tp_size // total_num_kv_heads``). CP then splits each
GPU's tokens; cpbench measures one GPU of one CP rank (docs/design.md §10).
"""

from __future__ import annotations

from dataclasses import replace

from cpbench.domain.models import ModelSpec
from cpbench.errors import CpbenchInputError

MAX_TP = 1024


def tp_heads(num_q_heads: int, num_kv_heads: int, tp_size: int) -> tuple[int, int]:
    """Per-GPU ``(q heads, kv heads)`` at attention TP ``tp_size``: ``num_q_heads / tp_size`` and
    ``max(1, num_kv_heads / tp_size)`` (KV heads replicated when ``num_kv_heads < tp_size``).

    Raises:
        CpbenchInputError: ``tp_size`` outside ``[1, 1024]``; ``num_q_heads`` not divisible by ``tp_size``;
            ``num_kv_heads >= tp_size`` and not divisible by it; ``num_kv_heads < tp_size`` and ``tp_size``
            not a multiple of ``num_kv_heads`` (the replicas would not be even).
    """
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or not 1 <= tp_size <= MAX_TP:
        raise CpbenchInputError(f"--tp must be an integer in [1, {MAX_TP}], got {tp_size!r}")
    if num_q_heads % tp_size:
        raise CpbenchInputError(f"--tp {tp_size} does not divide the model's {num_q_heads} query heads: "
                                f"pick a divisor of {num_q_heads}")
    if num_kv_heads >= tp_size and num_kv_heads % tp_size:
        raise CpbenchInputError(f"--tp {tp_size} does not divide the model's {num_kv_heads} KV heads: "
                                f"pick a divisor of {num_kv_heads} or a multiple of it")
    if num_kv_heads < tp_size and tp_size % num_kv_heads:
        raise CpbenchInputError(f"--tp {tp_size} is not a multiple of the model's {num_kv_heads} KV heads, so "
                                "they cannot be replicated evenly: pick a multiple or a divisor of it")
    return num_q_heads // tp_size, max(1, num_kv_heads // tp_size)


def split_heads(spec: ModelSpec, tp_size: int) -> ModelSpec:
    """``spec`` with one GPU's heads at attention TP ``tp_size`` (:func:`tp_heads`); the name is kept (the
    results carry ``tp_size`` in a column of its own). ``tp_size == 1`` returns ``spec`` unchanged.
    Raises CpbenchInputError as :func:`tp_heads`."""
    q, kv = tp_heads(spec.num_q_heads, spec.num_kv_heads, tp_size)
    return spec if tp_size == 1 else replace(spec, num_q_heads=q, num_kv_heads=kv)
