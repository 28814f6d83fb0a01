"""FlashAttention-3, the kernel of SGLang's ``--attention-backend fa3`` (its default on Hopper), in three modes.

SGLang's ``FlashAttentionBackend.forward_extend`` calls ``flash_attn_with_kvcache`` with the paged pool
(``k_cache``/``v_cache`` ``[num_pages, page_size, Hkv, D]``), ``page_table`` (``[bs, W]`` int32),
``cache_seqlens`` (kv lengths, int32 ``[bs]``), ``cu_seqlens_q`` (int32 ``[bs+1]``), ``max_seqlen_q``,
``causal=True``, ``window_size=(window_left, 0)`` on window layers and ``num_splits=0`` (the kernel's own
split-KV heuristic). For an extend batch it precomputes no scheduler metadata (SGLang does that for decode
only): each call runs FlashAttention-3's ``prepare_varlen_num_blocks`` kernel before its attention kernel.
Under zigzag CP, ``cp_attn_forward_extend`` makes that call twice per layer, once with the prev halves' and
once with the next halves' ``cu_seqlens_q``/``cache_seqlens``/``max_seqlen_q``, over the same table.

The modes here, on the same cell:

* ``two-call``: ``prev`` then ``next``, bs segments each, the ``[bs, W]`` table;
* ``fused``: SGLang PR #33137's call, one over the 2*bs segments with the row-duplicated ``[2*bs, W]`` table;
* ``cp-native``: one call over the 2*bs segments that reads the ``[bs, W]`` table through ``cache_batch_idx``
  (segment ``i`` reads row ``cache_batch_idx[i]``, its request's): the fused call with nothing duplicated.

The kernel: ``sgl_kernel.flash_attn`` (SGLang's fork, sinks inside the kernel) when installed, else upstream
``flash_attn_interface`` (Dao-AILab ``hopper/``). Upstream has no sinks: the timed call is the kernel alone (as
SGLang's kernel computes sinks in the same launch), and the correctness check folds the sinks in afterwards from
the log-sum-exp the kernel returns (:meth:`Prepared.local_outputs`), as the flex backend folds them. Upstream is
called through ``torch.ops.flash_attn_3.fwd``, the op ``flash_attn_with_kvcache`` reaches, with the same argument
values and ``out=`` a pre-allocated buffer (so, as on the other backends, no output is allocated or copied per
call); SGLang's fork is called through its ``flash_attn_with_kvcache`` and its result copied into the buffer (one
copy kernel per call, counted as ``copy``, not attention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from cpbench.domain.geometry import Segment
from cpbench.domain.modes import Mode
from cpbench.domain.models import ModelSpec
from cpbench.kernels.backends.base import (Prepared, Stopwatch, call_rows, calls_and_table, layer_tables,
                                           output_buffers, row_ranges, swa_table)
from cpbench.kernels.backends.registry import capability_refusal, get_spec
from cpbench.kernels.workload import RankWork

NOT_INSTALLED = ("FlashAttention-3 is not installed: build it from Dao-AILab/flash-attention's hopper/ "
                 "(cd hopper && python setup.py install; gives `import flash_attn_interface`) or install SGLang's "
                 "kernel package (sgl-kernel, `import sgl_kernel.flash_attn`)")
INSTALL_HINT = f"{NOT_INSTALLED}; or use --backend trtllm-fmha-v2"
HEAD_DIMS = (64, 128)  # what a default hopper/ build and sgl-kernel hold for bf16 (others need their own build)


@dataclass(frozen=True)
class Kernel:
    """Which FlashAttention-3 ran: ``source`` (``sgl_kernel.flash_attn`` or ``flash_attn_interface``), its
    distribution's ``version``, and whether it takes ``sinks`` in the kernel."""

    source: str
    version: str
    sinks_in_kernel: bool

    @property
    def text(self) -> str:
        """``"flash_attn_interface 3.0.0"``: the row's ``kernel_impl``."""
        return f"{self.source} {self.version}"


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def load_kernel() -> Kernel | None:
    """The FlashAttention-3 this process can call, in SGLang's order: ``sgl_kernel.flash_attn``, else upstream
    ``flash_attn_interface``; None when neither imports (never raises)."""
    try:
        import sgl_kernel.flash_attn  # noqa: F401

        return Kernel("sgl_kernel.flash_attn", _version("sgl-kernel"), True)
    except Exception:  # ImportError, or a build for another CUDA/torch failing at import
        pass
    try:
        import flash_attn_interface  # noqa: F401

        return Kernel("flash_attn_interface", _version("flash_attn_3"), False)
    except Exception:
        return None


@dataclass
class Fa3Call:
    """The per-call arguments of one ``flash_attn_with_kvcache`` call (FlashAttention-3's names).

    Attributes:
        name: ``prev``/``next`` (two-call) or ``combined`` (fused, cp-native, cp_size 1).
        rows: ``(start, end)`` of the call's query rows, in call order.
        cache_seqlens: int32 ``[n]`` kv length of each segment (tokens: prefix + extend up to the block's end).
        cu_seqlens_q: int32 ``[n+1]`` ``[0] + cumsum(q_len)``.
        max_seqlen_q: longest segment's query rows (tokens).
        page_table: int32 ``[B_k, W]``: ``[bs, W]`` (two-call, cp-native) or the row-duplicated ``[2*bs, W]``.
        cache_batch_idx: int32 ``[n]`` the page-table row each segment reads (cp-native), or None (segment i
            reads row i).
    """

    name: str
    rows: tuple[int, int]
    cache_seqlens: torch.Tensor
    cu_seqlens_q: torch.Tensor
    max_seqlen_q: int
    page_table: torch.Tensor
    cache_batch_idx: torch.Tensor | None


def segment_args(segs: list[Segment], table: torch.Tensor, native: bool) -> dict:
    """``cache_seqlens``, ``cu_seqlens_q``, ``max_seqlen_q``, ``page_table`` and ``cache_batch_idx`` of one call
    over ``segs`` reading ``table`` (int32 ``[rows, W]``, on the tensors' device).

    ``native``: each segment reads its request's row through ``cache_batch_idx`` (``table`` has bs rows);
    otherwise segment ``i`` reads row ``i`` of ``table`` (FlashAttention-3 without ``cache_batch_idx``), so
    ``segs[i].table_row`` must be ``i``.

    Raises:
        ValueError: a segment would read another row than the one FlashAttention-3 gives it.
    """
    dev = table.device
    i32 = dict(dtype=torch.int32, device=dev)
    q_lens = [s.q_len for s in segs]
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    if native:
        idx = torch.tensor([s.request for s in segs], **i32)
    else:
        wrong = next((i for i, s in enumerate(segs) if s.table_row != i), None)
        if wrong is not None:
            raise ValueError(f"segment {wrong} reads table row {segs[wrong].table_row}; without cache_batch_idx "
                             f"FlashAttention-3 gives it row {wrong}")
        idx = None
    return {"cache_seqlens": torch.tensor([s.kv_len for s in segs], **i32),
            "cu_seqlens_q": torch.tensor(cu, **i32), "max_seqlen_q": max(q_lens),
            "page_table": table, "cache_batch_idx": idx}


def mode_calls(work: RankWork, mode: str, table_two_call: torch.Tensor, table_fused: torch.Tensor) -> list[Fa3Call]:
    """A layer's calls in ``mode`` over the given tables (``table_two_call``: ``[bs, W]``; ``table_fused``: its
    row-duplicated ``[2*bs, W]``, read by ``fused`` only). cp-native is the fused call's segments (in the run's
    fused order) over ``table_two_call`` with ``cache_batch_idx``. Raises CpbenchInputError for an ineligible
    rank."""
    native = mode == Mode.CP_NATIVE
    base = Mode.FUSED if native else mode
    calls = work.geometry.calls(base, work.fused_order)
    table = table_fused if mode == Mode.FUSED and work.geometry.cp_size > 1 else table_two_call
    return [Fa3Call(name, rows, **segment_args(segs, table, native and work.geometry.cp_size > 1))
            for (name, segs), rows in zip(calls, row_ranges(calls))]


class FlashAttn3Backend:
    """FlashAttention-3's ``flash_attn_with_kvcache`` in two-call, fused and cp-native modes (module docstring)."""

    name = "fa3"

    def __init__(self) -> None:
        self.kernel = load_kernel()

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        """None, or why FlashAttention-3 cannot run here (no CUDA, not Hopper, not installed, not bf16/fp16,
        a head_dim outside :data:`HEAD_DIMS`)."""
        if device.type != "cuda":
            if self.kernel is None:  # cpbench doctor on a CPU machine: both facts, and how to get the kernel
                return f"fa3 needs a CUDA GPU (Hopper); none is in use, and {NOT_INSTALLED}; here use --backend torch"
            return "fa3 needs a CUDA GPU (Hopper); none is in use: use --backend torch"
        refusal = capability_refusal(self.name, tuple(torch.cuda.get_device_capability(device)))
        if refusal:
            return refusal
        if self.kernel is None:
            return INSTALL_HINT
        if dtype == torch.float32:
            return "fa3 runs bf16 (and fp16 where built) only: use --dtype bf16"
        if model.head_dim not in HEAD_DIMS:
            return (f"fa3: head_dim {model.head_dim} is outside the head dims a FlashAttention-3 build holds by "
                    f"default ({', '.join(map(str, HEAD_DIMS))}): rebuild hopper/ with it")
        if model.num_q_heads % model.num_kv_heads:
            return f"{model.num_q_heads} q heads are not a multiple of {model.num_kv_heads} kv heads"
        return None

    @property
    def kernel_impl(self) -> str:
        """Which FlashAttention-3 this backend calls, ``"<module> <version>"`` (``""`` when none imports)."""
        return self.kernel.text if self.kernel else ""

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """page_table = the fused call's row duplication (fused, cp > 1; with ``--swa-pool`` the SWA pool's table
        too), metadata = each call's int32 arrays (:func:`segment_args`), outputs = one buffer per layer kind.
        Raises RuntimeError (the reason) where :meth:`supports` refuses, CpbenchInputError for an ineligible
        rank."""
        reason = self.supports(work.q.device, work.model, work.q.dtype)
        if reason:
            raise RuntimeError(reason)
        sw = Stopwatch(work.q.device)
        m, cell = work.model, work.cell
        base = Mode.FUSED if mode == Mode.FUSED else Mode.TWO_CALL  # cp-native duplicates nothing
        with sw("page_table"):
            _, table = calls_and_table(work, base)
        swa = swa_table(work, base, sw)
        tables = layer_tables(work, table, swa)  # the tables the mode's calls read, per layer kind
        with sw("metadata"):
            two_call = {w: (cell.swa_block_tables if swa is not None and w >= 0 else cell.block_tables)
                        for w in m.layer_kinds}
            calls = {w: mode_calls(work, mode, two_call[w], tables[w]) for w in m.layer_kinds}
            q, row_order = call_rows(work, work.geometry.calls(Mode.FUSED if mode == Mode.CP_NATIVE else mode,
                                                               work.fused_order))
        with sw("outputs"):
            outputs = output_buffers(work)
        lse: dict = {}  # (window_left, call index) -> fp32 [Hq, rows], the last layer's (upstream kernel + sinks)
        keep_lse = cell.sinks is not None and not self.kernel.sinks_in_kernel
        launch = self._launcher()
        layers = []
        for i, w in enumerate(m.window_left_per_layer):
            k_cache, v_cache = cell.layer_kv(i)
            layers.append([(c.name, launch(q[c.rows[0]:c.rows[1]], k_cache, v_cache, c, w, cell.sinks,
                                           outputs[w][c.rows[0]:c.rows[1]], lse if keep_lse else None, (w, ci)))
                           for ci, c in enumerate(calls[w])])
        post = _sink_fold(calls, cell.sinks, lse) if keep_lse else None
        return Prepared(layers, outputs, sw.us, kernel_patterns=get_spec(self.name).kernel_patterns,
                        setup_mem=sw.mem, row_order=row_order, held=[] if swa is None else [swa], post=post,
                        columns={"kernel_impl": self.kernel_impl})

    def _launcher(self) -> Callable:
        return _sgl_kernel_call if self.kernel.sinks_in_kernel else _upstream_call


def _window(w: int) -> tuple[int, int]:
    """``window_size`` as SGLang passes it: ``(window_left, 0)`` on a window layer, ``(-1, -1)`` on a full one."""
    return (w, 0) if w >= 0 else (-1, -1)


def upstream_op() -> Callable:
    """``torch.ops.flash_attn_3.fwd``, the op upstream ``flash_attn_with_kvcache`` calls (registered by
    ``import flash_attn_interface``); returns ``(out, softmax_lse [Hq, total_q] fp32, out_accum, lse_accum)``."""
    import flash_attn_interface  # noqa: F401  (registers the op)

    return torch.ops.flash_attn_3.fwd


def _upstream_call(q, k_cache, v_cache, c: Fa3Call, w: int, sinks, out, lse: dict | None, key) -> Callable[[], None]:
    """Closure of one upstream FlashAttention-3 call: q ``[rows, Hq, D]``, out ``[rows, Hq, D]`` (pre-allocated);
    with ``lse`` (a model with sinks) the call's fp32 ``[Hq, rows]`` log-sum-exp is kept there under ``key``."""
    op = upstream_op()
    left, right = _window(w)
    scale = q.shape[-1] ** -0.5

    def call() -> None:
        res = op(q, k_cache, v_cache, out=out, cu_seqlens_q=c.cu_seqlens_q, seqused_k=c.cache_seqlens,
                 max_seqlen_q=c.max_seqlen_q, page_table=c.page_table, kv_batch_idx=c.cache_batch_idx,
                 softmax_scale=scale, is_causal=True, window_size_left=left, window_size_right=right, num_splits=0)
        if lse is not None:
            lse[key] = res[1]

    return call


def _sgl_kernel_call(q, k_cache, v_cache, c: Fa3Call, w: int, sinks, out, lse, key) -> Callable[[], None]:
    """Closure of one call of SGLang's fork (``sgl_kernel.flash_attn.flash_attn_with_kvcache``, sinks in the
    kernel), its result copied into ``out``. Not run by this project (its GPU machine has no sgl-kernel)."""
    from sgl_kernel.flash_attn import flash_attn_with_kvcache

    extra = {} if sinks is None else {"sinks": sinks}

    def call() -> None:
        out.copy_(flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=c.cache_seqlens, page_table=c.page_table,
            cache_batch_idx=c.cache_batch_idx, cu_seqlens_q=c.cu_seqlens_q, max_seqlen_q=c.max_seqlen_q,
            softmax_scale=q.shape[-1] ** -0.5, causal=True, window_size=_window(w), num_splits=0, **extra))

    return call


def _sink_fold(calls: dict[int, list[Fa3Call]], sinks: torch.Tensor, lse: dict):
    """``outputs -> outputs`` with the sinks folded in (copies, call order): each call's rows times
    ``sigmoid(lse - sink)``, from the log-sum-exp its last forward kept (``exp(sink)`` added to each softmax
    denominator; the same fold as the flex backend's ``fold_sinks``)."""
    sink = sinks.float().view(1, -1, 1)  # [1, Hq, 1]

    def post(outputs: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        folded = {}
        for w, o in outputs.items():
            o = o.clone()
            for ci, c in enumerate(calls[w]):
                r0, r1 = c.rows
                factor = torch.sigmoid(lse[(w, ci)].float().t().unsqueeze(-1) - sink)  # [rows, Hq, 1]
                o[r0:r1] = (o[r0:r1].float() * factor).to(o.dtype)
            folded[w] = o
        return folded

    return post
