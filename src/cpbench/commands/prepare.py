"""A cell's forwards, prepared one way for ``cpbench sweep``, ``profile`` and ``explain``: the sweep's Runner
builds a cell's inputs and each rank's work with :class:`CellPrep` (``measure.rank.measure_rank`` prepares each
mode); the profile (ranks in one process, its nsys child) and explain's child take :meth:`CellPrep.forwards`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from cpbench.domain.cells import CellSpec
from cpbench.domain.geometry import RankGeometry, all_ranks, eligibility
from cpbench.domain.models import ModelSpec
from cpbench.domain.modes import MODES, Mode
from cpbench.errors import CpbenchInputError
from cpbench.kernels.backends import get_backend
from cpbench.kernels.backends.base import Backend, Prepared
from cpbench.kernels.workload import CellInputs, RankWork, build_cell, rank_work
from cpbench.measure.rank import DTYPES


@dataclass(frozen=True)
class CellPrep:
    """What a cell's tensors are built from besides the cell: ``model`` (one GPU's heads under TP; its
    ``page_size`` pages the KV cache), ``device``, ``dtype`` (a key of ``DTYPES``: bf16, fp16, fp32), ``seed``,
    ``context_len`` (page-table width in tokens; None: the longest sequence), ``swa_pool`` (a separate
    sliding-window KV pool) and ``fused_order`` (the fused call's segment order, ``geometry.FUSED_ORDERS``)."""

    model: ModelSpec
    device: torch.device
    dtype: str = "bf16"
    seed: int = 0
    context_len: int | None = None
    swa_pool: bool = False
    fused_order: str = "prev-next"

    @classmethod
    def of(cls, cfg) -> "CellPrep":
        """How a sweep (``cfg``: a :class:`~cpbench.commands.config.SweepConfig`) prepares its cells."""
        return cls(cfg.model, cfg.device, cfg.dtype, cfg.seed, cfg.context_len, cfg.swa_pool, cfg.fused_order)

    def unsupported(self, backend: Backend) -> str | None:
        """Why ``backend`` cannot run the model in this dtype on this device (its ``supports``), or None."""
        return backend.supports(self.device, self.model, DTYPES[self.dtype])

    def check(self, backend: str, cell: CellSpec | None = None, ranks: Sequence[int] = ()) -> Backend:
        """The backend named ``backend``, once ``cell`` (None: no cell to check) and ``ranks`` can be prepared with it.

        Raises:
            CpbenchInputError: ``cell`` is not CP-eligible (PR #33137's rule), a rank is outside ``[0, cp_size)``,
                the backend is unknown, or ``"backend NAME: why"`` when it cannot run here (:meth:`unsupported`).
        """
        ok, why = (True, "") if cell is None else eligibility(cell.extend_lens, cell.cp_size)
        if not ok:
            raise CpbenchInputError(f"{cell.label()} is not CP-eligible: {why}")
        for r in ranks:
            if not 0 <= r < cell.cp_size:
                raise CpbenchInputError(f"--rank {r} is not a rank of cp_size {cell.cp_size}: use 0..{cell.cp_size - 1}")
        be = get_backend(backend)
        why = self.unsupported(be)
        if why:
            raise CpbenchInputError(f"backend {backend}: {why}")
        return be

    def inputs(self, cell: CellSpec) -> CellInputs:
        """The tensors every rank of ``cell`` reads (``kernels.workload.build_cell``, seeded): ``q_all``
        ``[sum(extend_lens), Hq, D]`` in ``dtype``; ``kv_buffers``, K/V caches ``[num_pages, page_size, Hkv, D]``
        in ``dtype``, paged by ``block_tables`` ``[bs, W]`` int32 (with ``swa_pool`` also the SWA pool's caches
        and ``swa_block_tables``); ``sinks`` ``[Hq]`` fp32 or None.

        Raises:
            torch.OutOfMemoryError: the device is full.
            CpbenchInputError: a bad page size or context length, or ``swa_pool`` for a model without window layers.
        """
        return build_cell(self.model, cell.extend_lens, cell.prefix_lens, page_size=self.model.page_size,
                          dtype=DTYPES[self.dtype], device=self.device, seed=self.seed, context_len=self.context_len,
                          swa_pool=self.swa_pool)

    def work(self, inputs: CellInputs, geometry: RankGeometry) -> RankWork:
        """One rank's work (``geometry``: that rank of ``domain.geometry.all_ranks``): ``q``
        ``[tokens_logical, Hq, D]`` in ``dtype`` (prev blocks, then next blocks) gathered from ``inputs``,
        ``token_index`` int64 ``[tokens_logical]``, and ``fused_order``. Raises CpbenchInputError for an
        unknown fused order."""
        return rank_work(inputs, geometry, self.fused_order)

    def forwards(self, cell: CellSpec, backend: str,
                 ranks: Sequence[int] | None = None) -> Iterator[tuple[int, Mode, RankWork, Prepared]]:
        """``(rank, mode, work, prepared)`` for each rank of ``ranks`` (None: every rank of ``cell``) and each
        mode (two-call, then fused), the cell's inputs built once; each prepared forward (outputs
        ``window_left -> [tokens_logical, Hq, D]`` in ``dtype``) has run once (JIT load, caches) and the device
        is synchronized. A generator: nothing is checked or built before the first item is asked for.

        Raises:
            CpbenchInputError: as :meth:`check`, and as :meth:`inputs`.
            torch.OutOfMemoryError: the device is full (building, preparing or running).
        """
        ranks = range(cell.cp_size) if ranks is None else ranks
        be = self.check(backend, cell, ranks)
        inputs = self.inputs(cell)
        geoms = all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)
        for r in ranks:
            work = self.work(inputs, geoms[r])
            for mode in MODES:
                prep = be.prepare(work, mode)
                prep.forward()
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                yield r, mode, work, prep
