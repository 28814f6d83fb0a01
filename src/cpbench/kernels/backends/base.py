"""Backend contract (after tritonbench: a name mapped to something that returns a zero-argument
closure, so all setup stays outside the timed region; a backend that cannot run says why).

A backend's ``prepare(work, mode)`` builds everything one forward needs (metadata, page tables, plans,
output buffers, workspace) and returns a :class:`Prepared` whose ``forward()`` only launches work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple, Protocol

import torch

from cpbench.domain.modes import Mode
from cpbench.domain.models import ModelSpec
from cpbench.kernels.workload import RankWork

Call = Callable[[], None]
STEP_KINDS = ("attention", "comm", "kv_write", "layer")


class Step(NamedTuple):
    """One step of a layer: ``name`` (``prev``/``next``/``combined`` for attention, ``gather``,
    ``kv_write``, ``before_attention``/``after_attention`` for the rest of the layer), a closure that only
    launches work, and its ``kind`` (one of :data:`STEP_KINDS`; ``layer``: the rest of the layer).
    ``step[0]``/``step[1]`` are name and closure, as in the ``(name, closure)`` pairs backends build."""

    name: str
    fn: Call
    kind: str = "attention"


@dataclass
class Prepared:
    """One rank's forward, ready to launch.

    Attributes:
        layers: per layer, a list of :class:`Step` (backends may pass ``(call_name, closure)`` pairs:
            they become attention steps); attention call names are ``prev``/``next`` (two-call) or
            ``combined`` (fused). Closures launch only; no host sync, no allocation of outputs.
        outputs: ``window_left -> out [tokens_logical, Hq, D]``, written by the last layer of that kind.
        setup_us: host µs of per-forward setup, by part (``metadata``, ``page_table``, ``plan``,
            ``outputs``).
        kernel_patterns: lower-case substrings that identify this backend's attention kernels by name.
        setup_mem: device bytes the setup holds, by part (``page_table``: the fused call's duplicated
            table; ``metadata``: indptr/indices arrays; ``plan``: each wrapper's plan and int
            workspace; ``workspace``: the float workspace the calls use; ``outputs``); measured with
            ``torch.cuda.memory_allocated`` deltas (:class:`Stopwatch`); empty on CPU.
        row_order: None when ``outputs`` rows are in local order; else int64 ``[tokens_logical]``, the
            local row of each output row (a fused call in another segment order, :func:`call_rows`).
            Read outputs through :meth:`local_outputs`.
        post: None, or ``outputs -> outputs`` (new tensors, call order) applied when outputs are read for a
            check: what the backend's timed calls leave out of the kernel (FlashAttention-3 upstream's sinks,
            folded in from its log-sum-exp).
        columns: row columns the backend adds (``kernel_impl``: which build of a kernel ran).
    """

    layers: list[list[tuple[str, Call]]]
    outputs: dict[int, torch.Tensor]
    setup_us: dict[str, float] = field(default_factory=dict)
    kernel_patterns: tuple[str, ...] = ()
    setup_mem: dict[str, int] = field(default_factory=dict)
    row_order: torch.Tensor | None = None
    held: list = field(default_factory=list)  # tensors the forward keeps allocated (the SWA pool's table)
    post: Callable[[dict[int, torch.Tensor]], dict[int, torch.Tensor]] | None = None
    columns: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.layers = [[s if isinstance(s, Step) else Step(*s) for s in steps] for steps in self.layers]

    def local_outputs(self) -> dict[int, torch.Tensor]:
        """``outputs`` with rows in local order (prev blocks, then next blocks): the buffers themselves,
        or an un-permuted copy when ``row_order`` is set, after :attr:`post` where set (outside any timed
        region)."""
        outs = self.outputs if self.post is None else self.post(self.outputs)
        if self.row_order is None:
            return outs
        return {w: torch.empty_like(o).index_copy_(0, self.row_order, o) for w, o in outs.items()}

    def forward(self) -> None:
        """Launch every step of every layer, in order."""
        for steps in self.layers:
            for step in steps:
                step.fn()

    @property
    def calls_per_layer(self) -> int:
        """Attention calls per layer (communication steps are not counted)."""
        return sum(s.kind == "attention" for s in self.layers[0]) if self.layers else 0

    @property
    def steps_per_layer(self) -> int:
        return len(self.layers[0]) if self.layers else 0

    def first_attention_call(self) -> Call:
        """The closure of layer 0's first attention step (to count kernels per call)."""
        return next(s.fn for s in self.layers[0] if s.kind == "attention")

    def with_steps_before(self, steps_for_layer: Callable[[int], list[Step]]) -> "Prepared":
        """This forward with ``steps_for_layer(i)`` (e.g. K|V all-gather, KV write) run before layer
        i's attention, as a CP layer does; outputs, setup and kernel patterns are shared."""
        return replace(self, layers=[[*steps_for_layer(i), *steps] for i, steps in enumerate(self.layers)],
                       setup_us=dict(self.setup_us), setup_mem=dict(self.setup_mem))


    def with_layer_work(self, before: Callable[[int], Call], after: Callable[[int], list]) -> "Prepared":
        """This forward with the rest of each layer around its steps: ``before(i)`` (norm, QKV projection,
        RoPE) first, as a ``layer`` step, and the ``(name, closure, kind)`` steps of ``after(i)`` (O
        projection, MLP or MoE, with real ranks the MoE's collectives) last (studies/breakable/layer_rest.py); outputs,
        setup and kernel patterns are shared."""
        layers = [[Step("before_attention", before(i), "layer"), *steps, *(Step(*x) for x in after(i))]
                  for i, steps in enumerate(self.layers)]
        return replace(self, layers=layers, setup_us=dict(self.setup_us), setup_mem=dict(self.setup_mem))


class Backend(Protocol):
    """A named attention implementation."""

    name: str

    def supports(self, device: torch.device, model: ModelSpec, dtype: torch.dtype) -> str | None:
        """None if it can run here, else a one-line reason."""

    def prepare(self, work: RankWork, mode: str) -> Prepared:
        """Build one forward of ``work`` in ``mode`` (``Mode.TWO_CALL`` or ``Mode.FUSED``)."""


class Stopwatch:
    """Accumulates host µs per named part, ``with sw("plan"): ...``, and on a CUDA ``device`` also the
    device bytes each part leaves allocated (``torch.cuda.memory_allocated`` after minus before, so
    512-byte allocator rounding included), in ``mem``."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.us: dict[str, float] = {}
        self.mem: dict[str, int] = {}
        self._cuda = device if device is not None and device.type == "cuda" else None
        self._name = ""
        self._t0 = 0.0
        self._b0 = 0

    def __call__(self, name: str) -> "Stopwatch":
        self._name = name
        return self

    def __enter__(self) -> None:
        if self._cuda is not None:
            self._b0 = torch.cuda.memory_allocated(self._cuda)
        self._t0 = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.us[self._name] = self.us.get(self._name, 0.0) + (time.perf_counter() - self._t0) * 1e6
        if self._cuda is not None:
            delta = torch.cuda.memory_allocated(self._cuda) - self._b0
            self.mem[self._name] = self.mem.get(self._name, 0) + delta

    def hold(self, name: str, tensor: torch.Tensor) -> None:
        """Count ``tensor`` (e.g. a workspace shared by every forward, allocated once) as held by part
        ``name``, whether or not this setup allocated it (on CUDA only, as ``mem``)."""
        if self._cuda is not None:
            self.mem[name] = self.mem.get(name, 0) + tensor.numel() * tensor.element_size()


def output_buffers(work: RankWork) -> dict[int, torch.Tensor]:
    """Pre-allocated outputs, one per layer kind: ``window_left -> [tokens_logical, Hq, D]`` (so no
    zero-fill kernel runs inside the timed forward)."""
    return {w: torch.empty_like(work.q) for w in work.model.layer_kinds}


def calls_and_table(work: RankWork, mode: str) -> tuple[list, torch.Tensor]:
    """A layer's calls (``RankGeometry.calls(mode)``) and the page table they read: ``[bs, W]`` int32
    for two-call (and cp_size 1), or the row-duplicated ``[2*bs, W]`` that the fused call reads,
    built here once per forward (SGLang PR #33137). Raises CpbenchInputError for an ineligible rank."""
    from cpbench.kernels.kv import duplicate_block_tables

    calls = work.geometry.calls(mode, work.fused_order)
    fused = mode == Mode.FUSED and work.geometry.cp_size > 1
    return calls, duplicate_block_tables(work.cell.block_tables, work.fused_order) if fused else work.cell.block_tables


def swa_table(work: RankWork, mode: str, sw: Stopwatch) -> torch.Tensor | None:
    """The page table the window layers' calls read with ``--swa-pool``: the SWA pool's ``[bs, W]`` int32
    for two-call (and cp_size 1), or its row-duplicated ``[2*bs, W]`` that the fused call reads, built here
    once per forward as SGLang builds ``zigzag_swa_page_table``; timed and measured as setup part
    ``swa_page_table`` of ``sw``. None, and no part, without ``--swa-pool``. Window layers read it with the
    SWA pool's caches (:meth:`CellInputs.layer_kv`); full layers read ``calls_and_table``'s table."""
    from cpbench.kernels.kv import duplicate_block_tables

    t = work.cell.swa_block_tables
    if t is None:
        return None
    with sw("swa_page_table"):
        fused = mode == Mode.FUSED and work.geometry.cp_size > 1
        return duplicate_block_tables(t, work.fused_order) if fused else t


def layer_tables(work: RankWork, table: torch.Tensor, swa: torch.Tensor | None) -> dict[int, torch.Tensor]:
    """``window_left -> the table that layer kind's calls read``: ``swa`` (:func:`swa_table`) for window
    kinds (``window_left >= 0``) when the cell has an SWA pool, else ``table`` (:func:`calls_and_table`)."""
    return {w: swa if w >= 0 and swa is not None else table for w in work.model.layer_kinds}


def call_rows(work: RankWork, calls) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Queries in call order and their local rows: ``(q [tokens_logical, Hq, D], row_order)``.

    ``row_order`` is None (and ``q`` is ``work.q``) when the calls' segments follow local order
    (two-call, the prev-next fused call); otherwise int64 ``[tokens_logical]`` with the local row of
    each call-order row, and ``q = work.q[row_order]`` (a copy made at prepare, outside timing)."""
    g = work.geometry
    start = {}
    row = 0
    for s in g.prev_segments() + g.next_segments():
        start[(s.part, s.request)] = row
        row += s.q_len
    order = [start[(s.part, s.request)] + i for _, segs in calls for s in segs for i in range(s.q_len)]
    if order == list(range(len(order))):
        return work.q, None
    idx = torch.tensor(order, dtype=torch.int64, device=work.q.device)
    return work.q.index_select(0, idx), idx


def row_ranges(calls) -> list[tuple[int, int]]:
    """Local query-row range ``[start, end)`` of each call (calls are consecutive in local order)."""
    out, start = [], 0
    for _, segs in calls:
        n = sum(s.q_len for s in segs)
        out.append((start, start + n))
        start += n
    return out
