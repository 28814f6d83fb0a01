"""trtllm-gen context attention (compute capability 10.x only): the kernel of SGLang PR #33137.

Called as SGLang's TRT-LLM MHA backend calls ``flashinfer.prefill.trtllm_batch_context_with_kv_cache``:
(K, V) as HND views ``[num_pages, Hkv, page_size, D]`` of the cache, ``block_tables`` = the page table
``[bs, W]`` (two-call) or the row-duplicated table ``[2*bs, W]`` (fused), ``seq_lens`` = kv lengths,
``cum_seq_lens_q/kv``, ``max_q_len``, ``max_kv_len`` = context length, ``bmm1_scale = head_dim**-0.5``,
``bmm2_scale = 1``, ``batch_size`` = segments, ``window_left`` per layer, fp32 ``sinks``, a zeroed 512 MiB
workspace and a pre-allocated ``out``. Not run on hardware by this project (no Blackwell GPU here).
"""

from __future__ import annotations

import os

import torch

from cpbench.bench.backends.base import (Prepared, Stopwatch, call_rows, calls_and_table, output_buffers,
                                         row_ranges, swa_table)
from cpbench.bench.backends.registry import capability_refusal, get_spec
from cpbench.bench.models import ModelSpec
from cpbench.bench.workload import RankWork

WORKSPACE_BYTES = 512 << 20  # SGLang's TRT-LLM backend: zero-initialised 512 MiB byte buffer
CUBIN_HINT = ("offline it needs the flashinfer-cubin package of the same version as flashinfer-python, "
              "or FLASHINFER_CUBIN_DIR pointing at its cubins")


def _cu(xs: list[int], device) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(xs).cumsum(0).tolist()], dtype=torch.int32, device=device)


class TrtllmGenBackend:
    """SGLang's TRT-LLM MHA path (Blackwell)."""

    name = "trtllm-gen"

    def __init__(self) -> None:
        self._workspace: dict[torch.device, torch.Tensor] = {}

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        if device.type != "cuda":
            return "trtllm-gen needs a Blackwell GPU (compute capability 10.x); none is in use: use --backend torch"
        refusal = capability_refusal(self.name, tuple(torch.cuda.get_device_capability(device)))
        if refusal:
            return refusal
        try:
            import flashinfer.prefill  # noqa: F401
        except ImportError:
            return "flashinfer is not installed: pip install 'cpbench[flashinfer]'"
        if os.environ.get("FLASHINFER_NO_DOWNLOAD") and not os.environ.get("FLASHINFER_CUBIN_DIR"):
            from importlib.util import find_spec

            if find_spec("flashinfer_cubin") is None:
                return f"trtllm-gen cubins are not available offline: {CUBIN_HINT}"
        if dtype == torch.float32:
            return "trtllm-gen runs fp16/bf16 only: use --dtype bf16"
        return None

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """Build the per-call arguments once; the forward calls the kernel with ``out=``."""
        from flashinfer.prefill import trtllm_batch_context_with_kv_cache

        sw = Stopwatch(work.q.device)
        cell, m, dev = work.cell, work.model, work.q.device
        with sw("page_table"):
            calls, table = calls_and_table(work, mode)
        held = swa_table(work, mode, sw)
        with sw("metadata"):
            ranges = row_ranges(calls)
            q, row_order = call_rows(work, calls)
            args = []
            for _, segs in calls:
                rows = torch.tensor([s.table_row for s in segs], device=dev)
                # block_tables: [segments, W] int32, rows of the plain (two-call) or duplicated (fused) table
                bt = table if [s.table_row for s in segs] == list(range(table.shape[0])) else table[rows]
                args.append(dict(
                    block_tables=bt,
                    seq_lens=torch.tensor([s.kv_len for s in segs], dtype=torch.int32, device=dev),
                    max_q_len=max(s.q_len for s in segs), max_kv_len=cell.context_len,
                    batch_size=len(segs), cum_seq_lens_q=_cu([s.q_len for s in segs], dev),
                    cum_seq_lens_kv=_cu([s.kv_len for s in segs], dev)))
        if dev not in self._workspace:
            self._workspace[dev] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        ws = self._workspace[dev]
        sw.hold("workspace", ws)
        with sw("outputs"):
            outputs = output_buffers(work)
        sinks = [cell.sinks] if cell.sinks is not None else None
        layers = []
        for i, w in enumerate(m.window_left_per_layer):
            k, v = cell.kv_buffers[cell.layer_buffer[i]]
            kv_hnd = (k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3))  # [num_pages, Hkv, page_size, D] views
            layer = []
            for (name, _), (r0, r1), a in zip(calls, ranges, args):
                kw = dict(a, query=q[r0:r1], kv_cache=kv_hnd, workspace_buffer=ws,
                          bmm1_scale=m.head_dim ** -0.5, bmm2_scale=1.0, window_left=w,
                          out=outputs[w][r0:r1], sinks=sinks, kv_layout="HND")
                layer.append((name, lambda kw=kw: trtllm_batch_context_with_kv_cache(**kw)))
            layers.append(layer)
        return Prepared(layers, outputs, sw.us, kernel_patterns=get_spec(self.name).kernel_patterns, setup_mem=sw.mem,
                        row_order=row_order, held=held)
