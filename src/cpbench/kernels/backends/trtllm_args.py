"""The TRT-LLM context-attention argument set of one rank, built once for every TRT-LLM kernel.

SGLang's TRT-LLM MHA backend (``_trtllm_context_attn``, PR #33137) calls the context kernel with:
``block_tables`` (the page table ``[bs, W]``, or its row-duplicated ``[2*bs, W]`` for the fused call),
``seq_lens`` = kv lengths, ``max_q_len``, ``max_kv_len`` = the context length the table is sized for,
``batch_size`` = segments, ``cum_seq_lens_q/kv`` = ``[0] + cumsum(...)`` (int32), ``bmm1_scale =
head_dim**-0.5``, ``bmm2_scale = 1`` and, per layer, ``window_left`` (-1 on full layers). FMHAv2 also
takes ``mask_mode``: ``"sliding_window"`` on window layers, ``"causal"`` on full layers. With a separate
SWA KV pool, window layers pass the SWA pool's table in ``block_tables`` (``swa_page_table``, fused: its
duplicate ``zigzag_swa_page_table``); :func:`call_tensors` builds a call's tensors from either table.

Both ``trtllm-gen`` (``trtllm_batch_context_with_kv_cache``, Blackwell) and ``trtllm-fmha-v2``
(``trtllm_fmha_v2_prefill``, Hopper/SM120) take their arguments from :func:`trtllm_calls` and
:func:`layer_args`, so the two cannot drift from each other or from the PR.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch

from cpbench.domain.geometry import RankGeometry


@dataclass(frozen=True)
class TrtllmCall:
    """One attention call's TRT-LLM arguments, on host ints (lengths in tokens).

    Attributes:
        name: ``prev`` / ``next`` (two-call) or ``combined`` (fused, or cp_size 1).
        table_rows: the row of the call's page table each segment reads, ``[batch_size]``: rows of the
            plain table ``[bs, W]`` (two-call) or of the duplicated ``[2*bs, W]`` (fused).
        seq_lens: kv length of each segment (``kv_len_prev`` / ``kv_len_next`` / ``kv_len_combined``).
        cum_seq_lens_q: ``[0] + cumsum(q lengths)``, ``[batch_size + 1]`` (``cu_seqlens_q_*``).
        cum_seq_lens_kv: ``[0] + cumsum(seq_lens)``, ``[batch_size + 1]`` (``cu_seqlens_kv_*``).
        max_q_len: longest query segment (``max_seqlen_q_*``).
        max_kv_len: the context length the page table is sized for (SGLang passes ``max_context_len``).
        q_rows: ``(start, end)`` query rows of this call in call order.
    """

    name: str
    table_rows: tuple[int, ...]
    seq_lens: tuple[int, ...]
    cum_seq_lens_q: tuple[int, ...]
    cum_seq_lens_kv: tuple[int, ...]
    max_q_len: int
    max_kv_len: int
    q_rows: tuple[int, int]

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)


def trtllm_calls(geometry: RankGeometry, mode: str, context_len: int,
                 fused_order: str = "prev-next") -> list[TrtllmCall]:
    """The TRT-LLM calls of one layer on one rank (``RankGeometry.calls``: two for two-call, one over
    ``2*bs`` segments for fused), each with the arguments SGLang's TRT-LLM backend passes.

    Args:
        geometry: the rank's zigzag metadata.
        mode: ``Mode.TWO_CALL`` or ``Mode.FUSED``.
        context_len: tokens the page table's width is sized for (``max_kv_len``), >= every kv length.
        fused_order: segment order of the fused batch (``geometry.FUSED_ORDERS``).
    Raises:
        CpbenchInputError: unknown mode or order, or a rank that is not CP-eligible.
    Example (docs/design.md §1, C=4, extend [11, 13], prefix [8, 14], rank 0, fused): one ``combined``
    call, ``seq_lens (10, 16, 19, 27)``, ``cum_seq_lens_q (0, 2, 4, 5, 6)``, ``cum_seq_lens_kv
    (0, 10, 26, 45, 72)``, ``max_q_len 2``, ``table_rows (0, 1, 2, 3)``.
    """
    out, row = [], 0
    for name, segs in geometry.calls(mode, fused_order):
        q = [s.q_len for s in segs]
        kv = tuple(s.kv_len for s in segs)
        out.append(TrtllmCall(name, tuple(s.table_row for s in segs), kv, (0, *accumulate(q)), (0, *accumulate(kv)),
                              max(q), context_len, (row, row + sum(q))))
        row += sum(q)
    return out


def layer_args(window_left: int, head_dim: int) -> dict:
    """Per-layer TRT-LLM arguments: ``window_left`` (-1 = full attention), FMHAv2's ``mask_mode``
    (``"sliding_window"`` when ``window_left >= 0``, else ``"causal"``), ``bmm1_scale = head_dim**-0.5``
    (the softmax scale folded into Q·K^T) and ``bmm2_scale = 1.0``."""
    return dict(window_left=window_left, mask_mode="sliding_window" if window_left >= 0 else "causal",
                bmm1_scale=head_dim ** -0.5, bmm2_scale=1.0)


def call_tensors(call: TrtllmCall, table: torch.Tensor) -> dict:
    """A call's device arguments: ``block_tables`` int32 ``[batch_size, W]`` (``table`` itself when the
    call reads every row in order, else those rows), ``seq_lens`` int32 ``[batch_size]``,
    ``cum_seq_lens_q/kv`` int32 ``[batch_size + 1]``, plus ``max_q_len``, ``max_kv_len``, ``batch_size``;
    on ``table``'s device."""
    dev = table.device
    rows = list(call.table_rows)
    bt = table if rows == list(range(table.shape[0])) else table[torch.tensor(rows, device=dev)]
    as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev)  # noqa: E731
    return dict(block_tables=bt, seq_lens=as_i32(call.seq_lens), cum_seq_lens_q=as_i32(call.cum_seq_lens_q),
                cum_seq_lens_kv=as_i32(call.cum_seq_lens_kv), max_q_len=call.max_q_len, max_kv_len=call.max_kv_len,
                batch_size=call.batch_size)
