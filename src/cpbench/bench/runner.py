"""Sweep runner: cell x rank x backend x mode x timing -> tidy rows.

Per cell (batch at one cp_size) the inputs are built once; per rank and mode the backend prepares a
forward (metadata, page tables, plans, outputs: timed as host setup, outside the timed region); both
modes are then timed interleaved (ABBA) per timing mode. A cell that cannot run becomes rows with a
status and a reason, and the sweep goes on.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from cpbench.bench import check as checks
from cpbench.bench.backends import get_backend
from cpbench.bench.backends.base import Prepared
from cpbench.bench.env import sm_clock_mhz
from cpbench.bench.geometry import all_ranks, attention_flops, eligibility
from cpbench.bench.kv import duplicate_block_tables, table_bytes
from cpbench.bench.models import ModelSpec
from cpbench.bench.results import SCHEMA_VERSION, row_key
from cpbench.bench.timing import Clock, capture_graph, host_enqueue_us, summarize, time_interleaved, time_op_us
from cpbench.bench.workload import CellInputs, RankWork, build_cell, rank_work
from cpbench.errors import CpbenchInputError, one_line

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def cpu_tflop_limit() -> float:
    """TFLOP per forward above which the CPU reference refuses a cell: ``$CPBENCH_CPU_TFLOP_LIMIT``, default 2
    (about a minute per forward on 2 cores). Raises CpbenchInputError for a value that is not a number > 0."""
    text = os.environ.get("CPBENCH_CPU_TFLOP_LIMIT", "2")
    try:
        limit = float(text)
    except ValueError:
        limit = math.nan
    if not limit > 0:
        raise CpbenchInputError(f"CPBENCH_CPU_TFLOP_LIMIT must be a number of TFLOP > 0, got {text!r}")
    return limit


def cpu_refusal(model: ModelSpec, cell: CellSpec) -> str | None:
    """Why the CPU reference refuses ``cell`` (too many TFLOP per forward for rank 0), or None."""
    g = all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)[0]
    tflop = sum(attention_flops(segs, model.num_q_heads, model.head_dim, w)
                for w in model.window_left_per_layer for _, segs in g.calls("fused")) / 1e12
    limit = cpu_tflop_limit()
    if tflop > limit:
        return (f"about {tflop:.3g} TFLOP per forward is too much for the CPU reference (limit {limit:g}, "
                "CPBENCH_CPU_TFLOP_LIMIT): use a GPU, or a smaller --seq/--bs")
    return None


@dataclass
class SweepConfig:
    """What to measure. Lengths in tokens, budget in ms."""

    model: ModelSpec
    cp_sizes: list[int]
    bs_list: list[int]
    seq_list: list[int]
    backend: str
    device: torch.device
    seq_lens: list[int] | None = None  # one explicit (heterogeneous) batch instead of bs x seq
    prefix: int = 0
    ranks: list[int] | None = None  # None: every rank
    modes: list[str] = field(default_factory=lambda: ["two-call", "fused"])
    timings: list[str] = field(default_factory=lambda: ["eager"])
    budget_ms: float = 200.0
    warmup: int = 3
    dtype: str = "bf16"
    seed: int = 0
    check: bool = True
    context_len: int | None = None
    profile: bool = True
    nvtx: bool = False  # NVTX ranges (cell, layer, call) around timed eager forwards


@dataclass(frozen=True)
class CellSpec:
    cp_size: int
    extend_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...]

    @property
    def bs(self) -> int:
        return len(self.extend_lens)

    @property
    def seq_len(self) -> int:
        return max(self.extend_lens)

    def label(self) -> str:
        return f"cp{self.cp_size} bs{self.bs} seq{self.seq_len}"


def plan_cells(cfg: SweepConfig) -> list[CellSpec]:
    """Every cell of the sweep, in cp, bs, seq order (or cp x the one explicit batch)."""
    batches = ([tuple(cfg.seq_lens)] if cfg.seq_lens else
               [(seq,) * bs for bs in cfg.bs_list for seq in cfg.seq_list])
    return [CellSpec(cp, ext, (cfg.prefix,) * len(ext)) for cp in cfg.cp_sizes for ext in batches]


class Runner:
    """Runs cells, calling ``emit(row)`` for each row as soon as it is measured.

    ``done`` holds row keys (results.row_key) already on disk; those rows are not measured again.
    With ``cfg.profile`` one eager forward per rank and mode is profiled (torch.profiler) to fill the
    kernel-count columns; ``trace_dir`` (optional) receives its Chrome trace.
    """

    def __init__(self, cfg: SweepConfig, emit: Callable[[dict], None], done: set | None = None,
                 trace_dir: Path | None = None) -> None:
        self.cfg = cfg
        self._sink = emit
        self.done = done or set()
        self.trace_dir = trace_dir
        self._kpc: dict = {}  # kernels per call, measured once per (cell, mode)
        self.cpu_threads: int | None = None
        if cfg.device.type == "cpu":
            # the CPU reference runs many small ops: one intra-op thread is steadier (on 2 cores about
            # as fast); several threads spin against any other load. OMP_NUM_THREADS overrides.
            if "OMP_NUM_THREADS" not in os.environ:
                torch.set_num_threads(1)
            self.cpu_threads = torch.get_num_threads()
        self.backend = get_backend(cfg.backend)
        self.clock = Clock(cfg.device)
        self.mismatches = 0

    # -- rows ------------------------------------------------------------------------------------
    def emit(self, row: dict) -> None:
        """Hand a row to the sink and remember its key (so no later status row duplicates it)."""
        self.done.add(row_key(row))
        self._sink(row)

    def _base(self, cell: CellSpec, rank: int, mode: str, timing: str) -> dict:
        c = self.cfg
        return dict(schema_version=SCHEMA_VERSION, model=c.model.name, backend=c.backend, timing=timing,
                    dtype=c.dtype, cp_size=cell.cp_size, bs=cell.bs, seq_len=cell.seq_len,
                    prefix_len=c.prefix, seq_lens=",".join(map(str, cell.extend_lens)), rank=rank,
                    mode=mode, page_size=c.model.page_size, num_layers=c.model.num_layers)

    def _ranks(self, cell: CellSpec) -> list[int]:
        return self.cfg.ranks if self.cfg.ranks is not None else list(range(cell.cp_size))

    def _todo(self, cell: CellSpec, rank: int) -> list[tuple[str, str]]:
        return [(m, t) for m in self.cfg.modes for t in self.cfg.timings
                if row_key(self._base(cell, rank, m, t)) not in self.done]

    def _emit_status(self, cell: CellSpec, ranks: list[int], status: str, reason: str) -> None:
        for r in ranks:
            for m, t in self._todo(cell, r):
                self.emit({**self._base(cell, r, m, t), "status": status, "reason": reason})

    # -- cells -----------------------------------------------------------------------------------
    def run_cell(self, cell: CellSpec, on_rank: Callable[[], None] = lambda: None) -> None:
        """Measure every missing row of one cell; never raises for a cell that cannot run."""
        ranks = [r for r in self._ranks(cell) if self._todo(cell, r)]
        skipped = len(self._ranks(cell)) - len(ranks)
        for _ in range(skipped):
            on_rank()
        if not ranks:
            return
        ok, reason = eligibility(cell.extend_lens, cell.cp_size)
        why = None if ok else ("ineligible", reason)
        why = why or self._unsupported(cell)
        if why:
            self._emit_status(cell, ranks, *why)
            for _ in ranks:
                on_rank()
            return
        inputs = None
        try:
            inputs = build_cell(self.cfg.model, cell.extend_lens, cell.prefix_lens,
                                page_size=self.cfg.model.page_size, dtype=DTYPES[self.cfg.dtype],
                                device=self.cfg.device, seed=self.cfg.seed, context_len=self.cfg.context_len)
            shared = self._cell_metrics(inputs)
            geoms = all_ranks(cell.extend_lens, cell.prefix_lens, cell.cp_size)
            for r in ranks:
                self._run_rank(cell, rank_work(inputs, geoms[r]), shared)
                on_rank()
        except CpbenchInputError:
            raise
        except Exception as e:  # the cell cannot run: record why for every row not yet measured
            if is_oom(e):
                self._emit_status(cell, ranks, "oom", f"out of memory building or running the cell: {one_line(e)}")
            else:
                self._emit_status(cell, ranks, "error", one_line(e))
        finally:
            del inputs
            if self.cfg.device.type == "cuda":
                torch.cuda.empty_cache()

    def _unsupported(self, cell: CellSpec) -> tuple[str, str] | None:
        reason = self.backend.supports(self.cfg.device, self.cfg.model, DTYPES[self.cfg.dtype])
        if reason:
            return "unsupported", reason
        if self.cfg.device.type == "cpu":  # the reference on a CPU: refuse what would run for hours
            why = cpu_refusal(self.cfg.model, cell)
            if why:
                return "unsupported", why
        return None

    def _cell_metrics(self, inputs: CellInputs) -> dict:
        bt = inputs.block_tables
        return dict(page_table_bytes=table_bytes(bt), kv_cache_bytes=inputs.kv_cache_bytes,
                    context_len=inputs.context_len, kv_buffers=len(inputs.kv_buffers),
                    dup_copy_us=time_op_us(lambda: duplicate_block_tables(bt), self.clock))

    # -- ranks -----------------------------------------------------------------------------------
    def _run_rank(self, cell: CellSpec, work: RankWork, shared: dict) -> None:
        todo = self._todo(cell, work.geometry.rank)
        modes = list(dict.fromkeys(m for m, _ in todo))
        prepared: dict[str, Prepared] = {}
        info: dict[str, dict] = {}
        for m in modes:
            try:
                prep = self.backend.prepare(work, m)
                info[m] = self._first_forward(work, prep)
                prepared[m] = prep  # only modes whose first forward ran are checked, profiled and timed
            except Exception as e:  # a backend failure is a row, not a crash (OOM fails the whole cell)
                if is_oom(e):
                    raise
                self._emit_mode(cell, work, m, todo, "error", one_line(e))
        if self.cfg.check and {"two-call", "fused"} <= set(prepared):
            info["fused"]["diff_vs_two_call"] = checks.max_abs_diff(prepared["fused"], prepared["two-call"])
        for m in list(prepared) if self.cfg.profile else []:  # after the checks: profiling reruns calls
            try:
                info[m].update(count_kernels(prepared[m], f"{cell.label()} r{work.geometry.rank} {m}",
                                             self.cfg.device, self.trace_dir, self._kpc, (cell, m)))
            except Exception as e:
                self._emit_mode(cell, work, m, todo, "error", f"kernel count failed: {one_line(e)}")
                del prepared[m]
        flops = sum(attention_flops(segs, work.model.num_q_heads, work.model.head_dim, w)
                    for w in work.model.window_left_per_layer for _, segs in work.geometry.calls("fused"))
        for timing in dict.fromkeys(t for _, t in todo):
            fns = self._timed_fns(prepared, timing, cell, work, todo)
            if not fns:
                continue
            clk0 = sm_clock_mhz(self.cfg.device)
            samples = time_interleaved(fns, self.clock, warmup=self.cfg.warmup, budget_ms=self.cfg.budget_ms,
                                       min_reps=5 if self.clock.cuda else 3)
            clk1 = sm_clock_mhz(self.cfg.device)
            for m, xs in samples.items():
                if (m, timing) not in todo:
                    continue
                self.emit(self._measured_row(cell, work, m, timing, xs, prepared[m], info[m], shared,
                                             flops, clk0, clk1))

    def _first_forward(self, work: RankWork, prep: Prepared) -> dict:
        dev = self.cfg.device
        out: dict = {"setup_us_" + k: v for k, v in prep.setup_us.items()}
        out["setup_us_total"] = sum(prep.setup_us.values())
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(dev)
            before = torch.cuda.memory_allocated(dev)
        prep.forward()  # also JIT-loads kernels
        self.clock.sync()
        out["peak_mem_bytes"] = (torch.cuda.max_memory_allocated(dev) - before) if dev.type == "cuda" else math.nan
        out["host_launch_us"] = host_enqueue_us(prep.forward, self.clock)
        out["max_abs_err"] = checks.max_abs_error(work, prep) if self.cfg.check else math.nan
        return out

    def _timed_fns(self, prepared, timing, cell, work, todo) -> dict:
        fns = {}
        for m, prep in prepared.items():
            if timing == "eager":
                fns[m] = prep.forward
                if self.cfg.nvtx:  # NVTX ranges around the timed forwards (~0.4 µs per range on the H200)
                    from cpbench.profiles.ranges import annotated_forward

                    g = work.geometry
                    fns[m] = annotated_forward(prep, f"{cell.label()} r{g.rank} {m} eager",
                                               {"cp_size": g.cp_size, "bs": cell.bs, "seq_len": cell.seq_len,
                                                "rank": g.rank}, nvtx_on=True, record_functions=False)
                continue
            try:
                fns[m] = capture_graph(prep.forward)
            except Exception as e:
                if is_oom(e):
                    raise
                self._emit_mode(cell, work, m, [(m, timing)] if (m, timing) in todo else [], "error",
                                f"CUDA graph capture failed: {one_line(e)}")
        return fns

    def _emit_mode(self, cell, work, mode, todo, status, reason) -> None:
        for m, t in todo:
            if m == mode:
                self.emit({**self._base(cell, work.geometry.rank, m, t), "status": status, "reason": reason})

    def _measured_row(self, cell, work, mode, timing, xs, prep, info, shared, flops, clk0, clk1) -> dict:
        g, model = work.geometry, work.model
        stats = summarize(xs)
        med = stats["latency_us_median"]
        row = {**self._base(cell, g.rank, mode, timing), **stats, "samples_us": [round(x, 3) for x in xs],
               "per_layer_us": med / model.num_layers, "flops": flops,
               "tflops": flops / (med * 1e-6) / 1e12 if med > 0 else math.nan,
               **shared,
               "page_table_dup_bytes": 2 * shared["page_table_bytes"] if mode == "fused" and g.cp_size > 1 else 0,
               "dup_copy_us": shared["dup_copy_us"] if mode == "fused" and g.cp_size > 1 else 0.0,
               "tokens_logical": g.tokens_logical, "tokens_padded": g.tokens_padded,
               "max_kv_len": g.max_kv_len, "calls_per_layer": prep.calls_per_layer,
               "sm_clock_mhz_before": clk0, "sm_clock_mhz_after": clk1,
               "clock_drop": bool(clk0 > 0 and clk1 < 0.9 * clk0), **info}
        if timing == "graph":  # kernels are counted from eager forwards only (not per range in a graph)
            for k in ("attn_kernels", "attn_calls", "merge_kernels", "fill_kernels", "copy_kernels", "other_kernels",
                      "kernels", "launches"):
                row[k] = math.nan
        tol = checks.TOLERANCE[DTYPES[self.cfg.dtype]]
        err = row.get("max_abs_err", math.nan)
        diff = row.get("diff_vs_two_call", 0.0)
        if self.cfg.check and not (err <= tol and diff <= tol):  # NaN fails both comparisons
            self.mismatches += 1
            row.update(status="mismatch", reason=f"max |err| {err:.3g} (fused vs two-call {diff:.3g}) "
                                                 f"> tolerance {tol:g} against the fp32 torch reference")
        else:
            row.update(status="ok", reason="")
        return row


def count_kernels(prep: Prepared, label: str, device: torch.device, trace_dir: Path | None = None,
                  kpc_cache: dict | None = None, kpc_key=None) -> dict:
    """Kernel-count columns of one eager forward (profiles.capture), checked against
    ``layers x calls per layer x kernels per call`` where kernels can be told apart by name.

    ``attn_kernels`` is GPU attention-kernel executions, or for the torch reference (no single
    attention kernel) the attention calls. Raises ProfileError when zero attention work is seen.
    """
    from cpbench.profiles.capture import expected_for, kernels_per_call, profile_prepared

    slug = label.replace(" ", "_")
    trace = trace_dir / f"{slug}.json.gz" if trace_dir is not None else None
    c = profile_prepared(prep, f"{label} eager", device, trace_path=trace,
                         steps_warmup=1 if device.type == "cuda" else 0)  # CPU: nothing to miss
    by_kernel = device.type == "cuda" and bool(prep.kernel_patterns)
    row = {"attn_kernels": c.attention if by_kernel else c.attention_calls, "attn_calls": c.attention_calls,
           "merge_kernels": c.merge, "fill_kernels": c.fill, "copy_kernels": c.copy,
           "other_kernels": c.other + c.merge + c.fill + c.copy, "kernels": c.kernels, "launches": c.launches}
    kpc = (kpc_cache or {}).get(kpc_key)
    if kpc is None:
        kpc = kernels_per_call(prep.layers[0][0][1], prep.kernel_patterns, device) if by_kernel else 1
        if kpc_cache is not None:
            kpc_cache[kpc_key] = kpc
    row["kernels_per_call"] = kpc
    row["attn_kernels_expected"] = expected_for(prep, kpc)
    if row["attn_kernels"] != row["attn_kernels_expected"]:
        raise RuntimeError(f"counted {row['attn_kernels']} attention kernels, expected "
                           f"{row['attn_kernels_expected']} (layers x calls x kernels/call)")
    if trace is not None:
        row["trace"] = str(trace)
    return row


def is_oom(e: BaseException) -> bool:
    """CUDA OOM, or a CPU allocation failure (torch raises a plain RuntimeError for those)."""
    text = str(e).lower()
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(e, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))
