"""Device memory a mode needs, measured (docs/design.md §4): what its setup leaves allocated, by kind
of allocation, and the peak of its first forward on top of that.

All figures come from the CUDA caching allocator's statistics (``torch.cuda.memory_allocated`` /
``max_memory_allocated``, so in 512-byte allocator blocks). The CPU allocator keeps no such
statistics: there every memory column is NaN and ``mem_reason`` says why, never a 0 that means
"not measured".
"""

from __future__ import annotations

import contextlib
import math

import torch

from cpbench.results.schema import CPU_MEM_REASON as CPU_REASON, SETUP_PARTS


class SetupMemory:
    """Context manager around one mode's setup on ``device``: the bytes it leaves allocated in total,
    in named parts (``with mem.part("comm"): ...``), and its transient peak above that.

    ``finish(parts)`` merges the backend's own per-part bytes (:attr:`Prepared.setup_mem`) and returns
    ``{"parts": {kind: bytes}, "total": bytes, "transient": bytes}`` (ints), or None on CPU.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device if device.type == "cuda" else None
        self.parts: dict[str, int] = {}
        self.before = self.after = self.peak = 0

    def __enter__(self) -> "SetupMemory":
        if self.cuda is not None:
            torch.cuda.synchronize(self.cuda)
            torch.cuda.reset_peak_memory_stats(self.cuda)
            self.before = torch.cuda.memory_allocated(self.cuda)
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda is not None:
            self.after = torch.cuda.memory_allocated(self.cuda)
            self.peak = torch.cuda.max_memory_allocated(self.cuda)

    @contextlib.contextmanager
    def part(self, name: str):
        b0 = torch.cuda.memory_allocated(self.cuda) if self.cuda is not None else 0
        try:
            yield
        finally:
            if self.cuda is not None:
                self.parts[name] = self.parts.get(name, 0) + torch.cuda.memory_allocated(self.cuda) - b0

    def finish(self, backend_parts: dict[str, int]) -> dict | None:
        if self.cuda is None:
            return None
        parts = {**{k: int(v) for k, v in backend_parts.items()}, **self.parts}
        allocated = self.after - self.before  # what this setup allocated (a shared workspace may predate it)
        named_allocated = sum(v for k, v in parts.items() if k != "workspace")
        parts["other"] = max(0, allocated - named_allocated - _new_workspace(parts, allocated, named_allocated))
        total = sum(parts.values())
        return {"parts": parts, "total": total, "transient": max(0, self.peak - self.after)}


def _new_workspace(parts: dict[str, int], allocated: int, named: int) -> int:
    """Workspace bytes allocated by this very setup (the first prepare of a backend allocates its shared
    workspace; later ones reuse it), so they are not also counted as "other"."""
    return min(parts.get("workspace", 0), max(0, allocated - named))


def memory_columns(setup: dict | None, forward_bytes: float) -> dict:
    """Row columns from :meth:`SetupMemory.finish` and the first forward's peak above what was
    allocated before it (bytes; NaN on CPU).

    Returns ``setup_mem_<part>`` per kind in :data:`SETUP_PARTS`, ``setup_mem_bytes`` (their sum: what
    the mode holds once set up, the shared float workspace included), ``forward_mem_bytes`` (the
    forward's transient peak), ``peak_mem_bytes`` = setup + max(forward, the setup's own transient
    peak), and ``mem_reason`` ("" when measured).
    """
    if setup is None or not math.isfinite(forward_bytes):
        cols = {f"setup_mem_{k}": math.nan for k in SETUP_PARTS}
        return {**cols, "setup_mem_bytes": math.nan, "forward_mem_bytes": math.nan, "peak_mem_bytes": math.nan,
                "mem_reason": CPU_REASON}
    cols = {f"setup_mem_{k}": float(setup["parts"].get(k, 0)) for k in SETUP_PARTS}
    return {**cols, "setup_mem_bytes": float(setup["total"]), "forward_mem_bytes": float(forward_bytes),
            "peak_mem_bytes": float(setup["total"] + max(forward_bytes, setup["transient"])), "mem_reason": ""}
