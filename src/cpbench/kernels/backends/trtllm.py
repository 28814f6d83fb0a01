"""TRT-LLM context attention through FlashInfer: the kernel family SGLang PR #33137 fuses.

* ``trtllm-gen`` (compute capability 10.x): ``flashinfer.prefill.trtllm_batch_context_with_kv_cache``,
  called as SGLang's TRT-LLM MHA backend calls it: (K, V) as HND views ``[num_pages, Hkv, page_size, D]``
  of the cache, ``kv_layout="HND"``. Not run on hardware by this project (no Blackwell GPU here).
* ``trtllm-fmha-v2`` (9.x Hopper, 12.x): ``flashinfer.prefill.trtllm_fmha_v2_prefill``, TRT-LLM's FMHAv2
  context kernels, layout ``"Q_PAGED_KV_NHD"`` with the separate K/V caches of one allocation and the
  page table expanded to K/V block offsets ``[rows, 2, W]`` (:func:`cpbench.kernels.kv.kv_block_offsets`).

Both take the same per-call argument set from :mod:`cpbench.kernels.backends.trtllm_args` (page table
``[bs, W]`` for two-call, the row-duplicated ``[2*bs, W]`` for fused, kv lengths, cumulative lengths,
``max_kv_len`` = context length, ``bmm1_scale = head_dim**-0.5``, ``bmm2_scale = 1``, ``window_left`` per
layer), fp32 ``sinks``, SGLang's zeroed 512 MiB workspace and a pre-allocated ``out``. With ``--swa-pool``
window layers pass the SWA pool's table (``swa_page_table``; fused: its duplicate, ``zigzag_swa_page_table``)
and the SWA pool's caches, as SGLang's backend does; full layers pass the full pool's.
"""

from __future__ import annotations

import os
from typing import Callable

import torch

from cpbench.kernels.backends.base import (Prepared, Stopwatch, call_rows, calls_and_table, layer_tables,
                                           output_buffers, swa_table)
from cpbench.kernels.backends.registry import capability_refusal, get_spec
from cpbench.kernels.backends.trtllm_args import call_tensors, layer_args, trtllm_calls
from cpbench.kernels.kv import kv_block_offsets
from cpbench.domain.models import ModelSpec
from cpbench.kernels.workload import RankWork

WORKSPACE_BYTES = 512 << 20  # SGLang's TRT-LLM backend: zero-initialised 512 MiB byte buffer
CUBIN_HINT = ("offline it needs the flashinfer-cubin package of the same version as flashinfer-python, "
              "or FLASHINFER_CUBIN_DIR pointing at its cubins")
_WORKSPACES: dict[torch.device, torch.Tensor] = {}  # one per device, shared by both backends (as SGLang shares it)


def workspace(device: torch.device) -> torch.Tensor:
    """The zeroed uint8 ``[512 MiB]`` workspace of ``device``, allocated once."""
    if device not in _WORKSPACES:
        _WORKSPACES[device] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _WORKSPACES[device]


class _TrtllmBackend:
    """What both TRT-LLM backends share: refusal checks and the per-forward setup; a subclass gives
    :meth:`_launcher` (the closure of one call)."""

    name = ""
    gpu_text = ""

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        """None, or why this backend cannot run here (no CUDA, another compute capability, no flashinfer,
        fp32)."""
        if device.type != "cuda":
            return f"{self.name} needs {self.gpu_text}; none is in use: use --backend torch"
        refusal = capability_refusal(self.name, tuple(torch.cuda.get_device_capability(device)))
        if refusal:
            return refusal
        try:
            import flashinfer.prefill  # noqa: F401
        except ImportError:
            return "flashinfer is not installed: pip install 'cpbench[flashinfer]'"
        if dtype == torch.float32:
            return f"{self.name} runs fp16/bf16 only: use --dtype bf16"
        return None

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """Build every call's arguments once (page_table = the duplicated table, swa_page_table = the SWA
        pool's, each as the kernel reads it; metadata = the argument tensors, per table read; outputs); the
        forward only launches. Raises CpbenchInputError for an ineligible rank."""
        sw = Stopwatch(work.q.device)
        cell, m = work.cell, work.model
        with sw("page_table"):
            calls, table = calls_and_table(work, mode)
            table = self._table(table, cell.num_pages)
        swa = swa_table(work, mode, sw)
        if swa is not None:
            with sw("swa_page_table"):  # the SWA pool's caches have as many pages (kernels.workload.build_cell)
                swa = self._table(swa, cell.num_pages)
        tables = layer_tables(work, table, swa)
        with sw("metadata"):
            q, row_order = call_rows(work, calls)
            tcalls = trtllm_calls(work.geometry, mode, cell.context_len, work.fused_order)
            args = {}  # id(table) -> per call, its argument tensors
            for t in tables.values():
                if id(t) not in args:
                    args[id(t)] = [call_tensors(c, t) for c in tcalls]
        ws = workspace(work.q.device)
        sw.hold("workspace", ws)
        with sw("outputs"):
            outputs = output_buffers(work)
        layers = []
        for i, w in enumerate(m.window_left_per_layer):
            kv = cell.layer_kv(i)  # the SWA pool's caches for a window layer with --swa-pool
            per_layer = layer_args(w, m.head_dim)
            layers.append([(c.name, self._launcher(dict(a, **per_layer), q[c.q_rows[0]:c.q_rows[1]], kv, ws,
                                                   cell.sinks, outputs[w][c.q_rows[0]:c.q_rows[1]]))
                           for c, a in zip(tcalls, args[id(tables[w])])])
        return Prepared(layers, outputs, sw.us, kernel_patterns=get_spec(self.name).kernel_patterns, setup_mem=sw.mem,
                        row_order=row_order, held=[] if swa is None else [swa])

    def _table(self, table: torch.Tensor, num_pages: int) -> torch.Tensor:
        """The page table as this kernel reads it (default: as is, ``[rows, W]``)."""
        return table

    def _launcher(self, args: dict, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], ws: torch.Tensor,
                  sinks: torch.Tensor | None, out: torch.Tensor) -> Callable[[], None]:
        raise NotImplementedError


class TrtllmGenBackend(_TrtllmBackend):
    """SGLang's TRT-LLM MHA path on Blackwell: ``trtllm_batch_context_with_kv_cache``."""

    name = "trtllm-gen"
    gpu_text = "a Blackwell GPU (compute capability 10.x)"

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype = torch.bfloat16) -> str | None:
        reason = super().supports(device, model, dtype)
        if reason is None and os.environ.get("FLASHINFER_NO_DOWNLOAD") and not os.environ.get("FLASHINFER_CUBIN_DIR"):
            from importlib.util import find_spec

            if find_spec("flashinfer_cubin") is None:
                return f"trtllm-gen cubins are not available offline: {CUBIN_HINT}"
        return reason

    def _launcher(self, args, q, kv, ws, sinks, out):
        from flashinfer.prefill import trtllm_batch_context_with_kv_cache

        k, v = kv
        kw = dict(args, query=q, kv_cache=(k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)),  # HND views
                  workspace_buffer=ws, out=out, sinks=[sinks] if sinks is not None else None, kv_layout="HND")
        kw.pop("mask_mode")  # the trtllm-gen kernel takes the window alone
        return lambda: trtllm_batch_context_with_kv_cache(**kw)


FMHA_V2_LAYOUT = "Q_PAGED_KV_NHD"
_DTYPE_TEXT = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def fmha_v2_module(dtype: torch.dtype = torch.bfloat16):
    """``(name, path)`` of flashinfer's compiled FMHAv2 module for :data:`FMHA_V2_LAYOUT` and ``dtype``
    (``<jit dir>/<name>/<name>.so``, as flashinfer 0.7.2 names it), or None without flashinfer."""
    try:
        from flashinfer.jit import env as jit_env
    except Exception:  # not installed, or it cannot load here
        return None
    d = _DTYPE_TEXT.get(dtype, "bf16")
    name = f"trtllm_fmha_v2_{FMHA_V2_LAYOUT.lower()}_{d}_{d}"
    return name, jit_env.FLASHINFER_JIT_DIR / name / f"{name}.so"


def fmha_v2_jit_state(dtype: torch.dtype = torch.bfloat16) -> str:
    """One line for ``cpbench doctor``: whether the FMHAv2 kernels are compiled, and where."""
    module = fmha_v2_module(dtype)
    if module is None:
        return "- (flashinfer is not installed)"
    name, path = module
    return (f"compiled ({path})" if path.exists() else
            f"not compiled: the first trtllm-fmha-v2 run compiles {name} once with nvcc (every head_dim "
            "variant; several minutes on a first machine, then cached)")


class TrtllmFmhaV2Backend(_TrtllmBackend):
    """TRT-LLM's FMHAv2 context attention (Hopper 9.x, 12.x): ``trtllm_fmha_v2_prefill``.

    Its kernels are JIT-compiled from the flashinfer wheel at first use per (layout, dtype): every
    head_dim variant at once, minutes on a first run, then cached (``cpbench doctor`` shows whether
    they are)."""

    name = "trtllm-fmha-v2"
    gpu_text = "a Hopper or SM120 GPU (compute capability 9.x or 12.x)"

    def first_use_note(self, dtype: torch.dtype = torch.bfloat16) -> str | None:
        """A line to print before the first run when the kernels are not compiled yet, else None."""
        module = fmha_v2_module(dtype)
        if module is None or module[1].exists():
            return None
        return (f"compiling TRT-LLM FMHAv2 kernels ({module[0]}) with nvcc: once per machine and dtype, several "
                "minutes (every head_dim variant); later runs reuse flashinfer's cache")

    def _table(self, table, num_pages):
        return kv_block_offsets(table, num_pages)  # [rows, 2, W]: K and V blocks of one allocation

    def _launcher(self, args, q, kv, ws, sinks, out):
        from flashinfer.prefill import trtllm_fmha_v2_prefill

        kw = dict(args, qkv=(q, kv), input_layout=FMHA_V2_LAYOUT, workspace_buffer=ws, out=out, sinks=sinks)
        return lambda: trtllm_fmha_v2_prefill(**kw)
