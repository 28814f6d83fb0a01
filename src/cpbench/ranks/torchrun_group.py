"""The ``torchrun`` launch as a :class:`~cpbench.ranks.group.RankGroup`: one process per CP rank.

A cell of ``cp_size`` C runs on global ranks ``0..C-1`` (C divides the world size); the other
processes sit the cell out but still take part in the world-wide exchanges (cell check, rows). Host
exchanges (agreement, status, rows) go over gloo groups; the per-layer K|V all-gather goes over the
CP group of the default backend (NCCL on GPUs). Every group has the launch's timeout.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from cpbench.domain.modes import Status
from cpbench.kernels.backends.base import Step
from cpbench.ranks import faults, process_groups as groups
from cpbench.ranks.kv_gather import (allocate_gather_buffers, build_gather_plan, check_gather, gather_bytes,
                                     gather_kv, gather_kv_checked, write_kv)
from cpbench.ranks.group import OK_PAIR, Exchange, PeerFailure, StatusPair
from cpbench.errors import CpbenchInputError


class TorchrunGroup:
    """This process is global rank ``info.rank`` of ``info.world_size``; it measures CP rank
    ``info.rank`` of every cell with ``cp_size > info.rank``.

    Args:
        info: from :func:`cpbench.ranks.process_groups.init_process_group_from_env`.
        gather: ``packed`` (one all_gather_into_tensor of cat([k, v], -1)), ``separate`` (K then V)
            or ``none`` (attention only, comparable with the simulated launch).
    """

    launch = "torchrun"

    def __init__(self, info: groups.DistInfo, gather: str = "packed") -> None:
        self.info = info
        self.rank, self.world_size = info.rank, info.world_size
        self.writes_rows = info.rank == 0
        self.gather = gather
        self._cp_size = 1
        self._cp: Any = None  # default-backend CP group (NCCL on GPUs)
        self._cp_host: Any = None  # gloo CP group (agreement, status)
        self._host_groups: dict[int, Any] = {}
        self._exchange: dict = {}  # per cell: (plans, buffers, local K/V per KV buffer)
        self._cells = 0  # cells begun
        self._agreeing = False  # every gather is preceded by a status agreement (Exchange.agreeing)

    def manifest_info(self) -> dict:
        """What the manifest records about the launch: world size, backend, NCCL version, every
        ``NCCL_*`` variable, and the GPU topology (``nvidia-smi topo -m``; None where unavailable)."""
        nccl = None
        if self.info.backend == "nccl":
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        return {"world_size": self.world_size, "dist_backend": self.info.backend, "dist_timeout_s": self.info.timeout_s,
                "gather": self.gather, "nccl_version": nccl,
                "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
                "gpu_topology": _topology() if self.info.device.type == "cuda" else None}

    # -- cells ---------------------------------------------------------------------------------------
    def begin_cell(self, cell_label: str, cp_size: int) -> None:
        labels = groups.all_gather_object_gloo((cell_label, cp_size))
        if len(set(labels)) != 1:
            raise RuntimeError(f"ranks hold different cells: {sorted(set(labels))[:4]} (a cpbench bug)")
        self._cp_size = cp_size
        self._cp = groups.cp_subgroups(self.world_size, cp_size)  # collective: every rank, same order
        if cp_size not in self._host_groups:
            self._host_groups[cp_size] = (groups.gloo_group() if cp_size == self.world_size else
                                          groups.new_group(list(range(cp_size)), "gloo", self.info.timeout_s))
        self._cp_host = self._host_groups[cp_size]
        self._exchange.clear()
        self._cells += 1

    def local_ranks(self, cp_size: int, wanted: Sequence[int] | None = None) -> list[int]:
        mine = self.rank < cp_size and (wanted is None or self.rank in wanted)
        return [self.rank] if mine else []

    # -- agreement (members of the cell's CP group only; a process outside it agrees with itself) ------
    @property
    def _member(self) -> bool:
        return self.rank < self._cp_size

    def barrier(self) -> None:
        if not self._member:
            return
        if self.info.device.type == "cuda":
            torch.cuda.synchronize()
        try:
            dist.barrier(group=self._cp_host)
        except Exception as e:
            raise groups.broken("a barrier before a sample", e) from e

    def agree(self, value: float) -> float:
        return groups.max_over_ranks(value, self._cp_host) if self._member else value

    def agree_status(self, status: StatusPair) -> StatusPair:
        if not self._member:
            return status
        every = groups.all_gather_object_gloo(tuple(status), self._cp_host)
        bad = [(r, s) for r, s in enumerate(every) if s[0] != Status.OK]
        if not bad:
            return OK_PAIR
        r, (st, reason) = bad[0]
        if r == self.rank or re.match(r"rank \d+: ", reason):  # already says whose failure it is
            return st, reason
        return st, f"rank {r}: {reason}"

    # -- rows and plans (every process) ----------------------------------------------------------------
    def collect(self, rows: list[dict]) -> list[dict]:
        every = groups.all_gather_object_gloo(rows)
        return [row for part in every for row in part] if self.writes_rows else []

    def share(self, obj: Any) -> Any:
        return groups.broadcast_object(obj, src=0)

    # -- the MoE all-to-all of a breakable forward ------------------------------------------------------------
    def all_to_all(self) -> "_AllToAll | None":
        """The cell's CP group as an all-to-all (RankGroup.all_to_all); None outside it or at cp_size 1."""
        if not self._member or self._cp_size < 2:
            return None
        return _AllToAll(self._cp, self._cp_size)

    # -- the per-layer K|V exchange ----------------------------------------------------------------------
    def exchange(self, work, mode: str) -> Exchange | None:
        """Gather -> KV-write steps for every layer (shared by both modes of a cell), or None for
        ``gather == "none"``. The first call per cell builds the plan and buffers (no collective);
        the Exchange's ``check`` verifies the gathered K|V (see :meth:`_check`)."""
        faults.inject(self.rank, self._cells, "prepare")
        if self.gather == "none":
            return None
        if not self._exchange:
            self._exchange.update(self._build(work))
        ex = self._exchange
        plan, bufs, local, cell, n = ex["plan"], ex["buffers"], ex["local"], work.cell, ex["rows"]

        last = len(cell.layer_buffer) - 1

        def gather(k_loc, v_loc, layer: int):
            if self._agreeing:
                self._before_gather(layer == last)
            try:
                return gather_kv_checked(plan, k_loc, v_loc, self._cp, self.gather, bufs, n)
            except Exception as e:
                raise groups.broken(f"the K|V all-gather of layer {layer}", e) from e

        def steps(layer: int) -> list[Step]:
            b = cell.layer_buffer[layer]
            k_loc, v_loc = local[b]  # the layer's own K/V rows (its values are those of full cache b)
            k_cache, v_cache = cell.layer_kv(layer)  # a window layer with --swa-pool: its SWA-pool cache
            at = ex["swa_plan"] if cell.reads_swa_pool(layer) else plan  # ... written at the SWA table's slots
            return [Step("gather", lambda: gather(k_loc, v_loc, layer), "comm"),
                    Step("kv_write", lambda: write_kv(at, bufs.k_full, bufs.v_full, k_cache, v_cache), "kv_write")]

        m = work.model
        return Exchange(steps, {"gather_bytes": gather_bytes(plan, m.num_kv_heads, m.head_dim,
                                                             cell.q_all.element_size(), self.gather)},
                        check=lambda: self._check(work), agreeing=self._agreeing_forward)

    @contextmanager
    def _agreeing_forward(self) -> Iterator[None]:
        """See :attr:`cpbench.ranks.group.Exchange.agreeing`."""
        self._agreeing = True
        try:
            yield
        finally:
            self._agreeing = False

    def _before_gather(self, last_layer: bool = False) -> None:
        """The agreement before a gather of an agreeing forward: PeerFailure when another rank failed.
        The ``forward`` phase of fault injection fires here, before the last layer's gather."""
        if last_layer:
            faults.inject(self.rank, self._cells, "forward")
        st = self.agree_status(OK_PAIR)
        if st != OK_PAIR:
            raise PeerFailure(st)

    def _build(self, work) -> dict:
        """Plan, buffers and this rank's own K/V rows of every full-pool KV buffer (no collective); with
        ``--swa-pool`` also the plan of the SWA pool's table (its slots: where window layers write)."""
        cell, g, m = work.cell, work.geometry, work.model
        plan = build_gather_plan(cell.extend_lens, cell.prefix_lens, g.cp_size, cell.page_size,
                                 cell.block_tables, cell.device)
        swa_plan = (None if cell.swa_block_tables is None else
                    build_gather_plan(cell.extend_lens, cell.prefix_lens, g.cp_size, cell.page_size,
                                      cell.swa_block_tables, cell.device))
        bufs = allocate_gather_buffers(plan, m.num_kv_heads, m.head_dim, cell.dtype, cell.device, self.gather)
        own = plan.slots.index_select(0, plan.rank_token_index[g.rank].to(cell.device))
        flat = [tuple(c.view(-1, *c.shape[2:]) for c in pair) for pair in cell.kv_buffers]
        local = [tuple(f.index_select(0, own) for f in pair) for pair in flat]  # [tokens_local, Hkv, D] each
        rows = check_gather(plan, *local[0], self._cp, self.gather, bufs)  # validated once, not per layer
        swa_flat = [tuple(c.view(-1, *c.shape[2:]) for c in pair) for pair in cell.swa_kv_buffers]
        return {"plan": plan, "swa_plan": swa_plan, "buffers": bufs, "local": local, "flat": flat,
                "swa_flat": swa_flat, "rows": rows, "checked": False}

    def _check(self, work) -> None:
        """Once per cell (every rank): a rank holds only its own tokens before the gather, so the
        extend slots of every KV buffer (the SWA pool's too, at its table's slots) are zeroed, then one
        gather + paged write must restore full buffer 0 bit for bit (the forward's own per-layer writes
        restore the others: a window layer's into its SWA-pool cache). Raises RuntimeError."""
        ex = self._exchange
        if ex["checked"]:
            return
        ex["checked"] = True
        plan, flat = ex["plan"], ex["flat"]
        want = tuple(f.index_select(0, plan.slots) for f in flat[0])  # full extend K, V in token order
        for pool, at in ((flat, plan), (ex["swa_flat"], ex["swa_plan"])):
            for pair in pool:
                for f in pair:
                    f.index_fill_(0, at.slots, 0)
        if self._agreeing:
            self._before_gather()
        try:
            full = gather_kv(plan, *ex["local"][0], self._cp, self.gather, ex["buffers"])
        except CpbenchInputError:
            raise
        except Exception as e:
            raise groups.broken("the K|V all-gather of the exchange check", e) from e
        write_kv(plan, *full, *work.cell.kv_buffers[0])
        got = tuple(f.index_select(0, plan.slots) for f in flat[0])
        if not all(torch.equal(a, b) for a, b in zip(got, want)):
            raise RuntimeError("the all-gathered K|V written to the paged cache differs from the full K|V")


class _AllToAll:
    """``all_to_all_single`` over one process group with equal splits, within the group's timeout; a broken or
    timed-out collective is raised as :func:`cpbench.ranks.process_groups.broken` naming the step."""

    def __init__(self, group: Any, ranks: int) -> None:
        self.group, self.ranks = group, ranks

    def __call__(self, out: torch.Tensor, inp: torch.Tensor, what: str) -> None:
        try:
            dist.all_to_all_single(out, inp, group=self.group)
        except Exception as e:
            raise groups.broken(what, e) from e


def _topology() -> str | None:
    """``nvidia-smi topo -m`` output, or None."""
    import subprocess

    try:
        p = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None
