"""FlashInfer's paged prefill, ``flashinfer-fa2`` and ``flashinfer-fa3`` (FlashInfer's ``backend="fa2"`` and
``backend="fa3"`` templates; fa2: compute capability >= 8.0, fa3: 9.0 only; see the registry). SGLang runs these
with ``--attention-backend flashinfer``; its ``fa3`` backend is FlashAttention-3 (:mod:`.flash_attn3`).

Models without sinks use ``BatchPrefillWithPagedKVCacheWrapper``; models with sinks use
``BatchAttentionWithAttentionSinkWrapper`` (the plain wrapper ignores ``sinks=`` on fa2/fa3). The
window is fixed at plan time, so each (call, layer kind) gets its own planned wrapper: two-call plans
prev and next over the page table ``[bs, W]``; fused plans one call over the 2*bs combined segments
whose page indices come from the row-duplicated table ``[2*bs, W]``. With ``--swa-pool`` the window
kinds' plans take their paged-KV arrays from the SWA pool's table (its duplicate for fused) and their
layers run on the SWA pool's caches. All plans, outputs and the workspace are built in ``prepare``; the
forward only calls ``run(..., out=...)``.
"""

from __future__ import annotations

import torch

from cpbench.kernels.backends.base import (Prepared, Stopwatch, call_rows, calls_and_table, layer_tables,
                                           output_buffers, row_ranges, swa_table)
from cpbench.kernels.backends.registry import capability_refusal, get_spec
from cpbench.kernels.kv import paged_kv_arrays
from cpbench.domain.models import ModelSpec
from cpbench.kernels.workload import RankWork

WORKSPACE_BYTES = 256 << 20  # float workspace shared by every wrapper (split-KV partials)
INSTALL_HINT = "pip install 'cpbench[flashinfer]' (flashinfer-python), or use --backend torch"

# flashinfer 0.7.2.post1 names the attention-sink JIT module by dtype, window on/off and backend but
# not head_dim, so a module built for one head_dim can be reused for another in the same process
# (docs/design.md §3 hazard). Remember which head_dim each such module was first built for, and refuse others.
_SINK_MODULE_HEAD_DIM: dict[tuple, int] = {}


def flashinfer_version() -> str | None:
    try:
        import flashinfer
    except ImportError:
        return None
    return getattr(flashinfer, "__version__", "unknown")


def _sink_module_keys(backend: str, model: ModelSpec, dtype: torch.dtype) -> list[tuple]:
    return [(backend, str(dtype), w >= 0) for w in model.layer_kinds]  # backend: FlashInfer's template


class FlashInferBackend:
    """FlashInfer's fa2 or fa3 template through its paged prefill wrappers.

    ``split_kv=False`` plans fa2 with ``disable_split_kv=True``. By default fa2's planner picks the
    KV chunk size from the whole batch's work (scheduler.cuh ``PrefillBinarySearchKVChunkSize``), so
    the fused batch (twice the segments) may split KV differently from each two-call batch and its
    outputs differ from two-call's by rounding (up to 2^-7 seen on the H200); without split-KV
    they are bit-identical. fa3 has no such option and was bit-identical on the H200.
    """

    def __init__(self, kind: str, split_kv: bool = True) -> None:
        """``kind``: FlashInfer's template, ``"fa2"`` or ``"fa3"`` (the backend is named ``flashinfer-<kind>``)."""
        assert kind in ("fa2", "fa3")
        self.kind = kind
        self.name = f"flashinfer-{kind}"
        self.split_kv = split_kv
        self._workspace: dict[torch.device, torch.Tensor] = {}

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        """None, or why this backend cannot run here (no CUDA, no flashinfer, wrong compute
        capability, fp32, or the sink-module head_dim hazard)."""
        if device.type != "cuda":
            return f"{self.name} needs a CUDA GPU; none is in use: use --backend torch"
        if flashinfer_version() is None:
            return f"flashinfer is not installed: {INSTALL_HINT}"
        refusal = capability_refusal(self.name, tuple(torch.cuda.get_device_capability(device)))
        if refusal:
            return refusal
        if dtype == torch.float32:
            return f"{self.name} runs fp16/bf16 only: use --dtype bf16"
        if model.has_sinks:
            for key in _sink_module_keys(self.kind, model, dtype):
                seen = _SINK_MODULE_HEAD_DIM.get(key)
                if seen is not None and seen != model.head_dim:
                    return (f"flashinfer's attention-sink module {key} was built for head_dim {seen} in this "
                            f"process and its name lacks head_dim (0.7.2.post1): run head_dim "
                            f"{model.head_dim} in a separate cpbench process")
        return None

    def _workspace_for(self, device: torch.device) -> torch.Tensor:
        if device not in self._workspace:
            self._workspace[device] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        return self._workspace[device]

    def _wrapper(self, work: RankWork, window_left: int):
        import flashinfer

        ws = self._workspace_for(work.q.device)
        m, dtype = work.model, work.q.dtype
        if m.has_sinks:
            for key in _sink_module_keys(self.kind, m, dtype):
                _SINK_MODULE_HEAD_DIM.setdefault(key, m.head_dim)
            return flashinfer.BatchAttentionWithAttentionSinkWrapper(
                ws, kv_layout="NHD", backend=self.kind, q_data_type=dtype, kv_data_type=dtype,
                head_dim_qk=m.head_dim, head_dim_vo=m.head_dim, window_left=window_left)
        return flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, kv_layout="NHD", backend=self.kind)

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """Plan every (call, layer kind); page_table = duplication (fused), metadata = host arrays (per
        table read: with ``--swa-pool`` the window kinds' from the SWA pool's table), plan = ``wrapper.plan``
        (host sync). Raises CpbenchInputError for an ineligible rank."""
        reason = self.supports(work.q.device, work.model, work.q.dtype)
        if reason:
            raise RuntimeError(reason)
        sw = Stopwatch(work.q.device)
        cell, m = work.cell, work.model
        with sw("page_table"):
            calls, table = calls_and_table(work, mode)
        swa = swa_table(work, mode, sw)
        tables = layer_tables(work, table, swa)
        with sw("metadata"):
            ranges = row_ranges(calls)
            q, row_order = call_rows(work, calls)
            qos = [torch.tensor([0, *torch.tensor([s.q_len for s in segs]).cumsum(0).tolist()],
                                dtype=torch.int32, device=work.q.device) for _, segs in calls]  # qo_indptr: [n+1]
            arrays = {}  # id(table) -> per call (qo_indptr, kv_indptr, kv_indices, last_page_len)
            for t in tables.values():
                if id(t) not in arrays:
                    arrays[id(t)] = [(qo, *paged_kv_arrays(segs, t, cell.page_size))
                                     for qo, (_, segs) in zip(qos, calls)]
        sw.hold("workspace", self._workspace_for(work.q.device))  # allocated once, outside the parts
        planned: dict[tuple[int, int], object] = {}
        extra = {} if self.split_kv or self.kind != "fa2" else {"disable_split_kv": True}
        with sw("plan"):
            for w in m.layer_kinds:
                for ci, (qo, kv_indptr, kv_indices, last) in enumerate(arrays[id(tables[w])]):
                    wrapper = self._wrapper(work, w)
                    wrapper.plan(qo, kv_indptr, kv_indices, last, m.num_q_heads, m.num_kv_heads, m.head_dim,
                                 cell.page_size, causal=True, window_left=w, sm_scale=m.head_dim ** -0.5,
                                 q_data_type=work.q.dtype, kv_data_type=work.q.dtype, **extra)
                    planned[(w, ci)] = wrapper
        with sw("outputs"):
            outputs = output_buffers(work)
        layers = []
        for i, w in enumerate(m.window_left_per_layer):
            kv = cell.layer_kv(i)  # the SWA pool's caches for a window layer with --swa-pool
            layers.append([(name, _run(planned[(w, ci)], q[r0:r1], kv, cell.sinks, outputs[w][r0:r1]))
                           for ci, ((name, _), (r0, r1)) in enumerate(zip(calls, ranges))])
        return Prepared(layers, outputs, sw.us, kernel_patterns=get_spec(self.name).kernel_patterns, setup_mem=sw.mem,
                        row_order=row_order, held=[] if swa is None else [swa])


def _run(wrapper, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], sinks: torch.Tensor | None,
         out: torch.Tensor):
    """Closure of one planned call: q ``[rows, Hq, D]``, out ``[rows, Hq, D]`` (pre-allocated)."""
    if sinks is not None:
        return lambda: wrapper.run(q, kv, sinks, out=out)
    return lambda: wrapper.run(q, kv, out=out)
