"""The names every layer shares for what a row measured: the attention mode, the timing method and the row's
status.

All are ``str`` enums: a member equals, hashes and serialises as its value (``Mode.TWO_CALL == "two-call"``,
``json.dumps`` writes ``"two-call"``), so rows, parquet files and JSON written before the enums read the same.
"""

from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    """A str enum whose ``str()`` and f-string form is its value (Python 3.10 has no ``enum.StrEnum``)."""

    def __str__(self) -> str:
        return str(self.value)

    __format__ = str.__format__

    @classmethod
    def parse(cls, text: str, option: str):
        """The member spelled ``text``; raises CpbenchInputError naming ``option`` and the allowed values."""
        from cpbench.errors import CpbenchInputError

        try:
            return cls(text)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise CpbenchInputError(f"{option}: {text!r} is not one of {allowed}") from None


class Mode(_StrEnum):
    """How a rank runs its two zigzag blocks per layer: two attention calls (``prev`` then ``next``), one
    fused call over a synthetic batch of 2*bs segments with a row-duplicated page table (SGLang PR #33137), or
    one CP-native call whose kernel knows each query's position in its request, over the request's own page-table
    row (no synthetic batch, nothing duplicated; the flex backend)."""

    TWO_CALL = "two-call"
    FUSED = "fused"
    CP_NATIVE = "cp-native"

    @property
    def tag(self) -> str:
        """The mode as it appears inside column names (``two_call``, ``fused``), e.g. ``speedup_two_call``."""
        return self.value.replace("-", "_")


class Timing(_StrEnum):
    """How a forward is timed: eager launches, one CUDA graph of the attention forward, or the breakable
    prefill forward (each layer's other work replayed from CUDA-graph segments, attention launched eagerly)."""

    EAGER = "eager"
    GRAPH = "graph"
    BREAKABLE = "breakable"


class Status(_StrEnum):
    """What became of a row (the ``status`` column; ``reason`` says why it is not ``ok``). ``ineligible``,
    ``skipped``, ``unsupported`` and ``oom`` are facts about a cell on this machine; ``mismatch`` (outputs
    that disagree beyond the tolerance) and ``error`` fail a sweep."""

    OK = "ok"
    INELIGIBLE = "ineligible"  # SGLang would not run the batch with CP (the CP rule)
    SKIPPED = "skipped"  # over --max-prefill-tokens, or the rest of the layer does not fit
    UNSUPPORTED = "unsupported"  # the backend has no call for the mode, or does not run here
    OOM = "oom"
    MISMATCH = "mismatch"
    ERROR = "error"


MODES: tuple[Mode, ...] = (Mode.TWO_CALL, Mode.FUSED)  # the pair every speedup compares (and the default)
ALL_MODES: tuple[Mode, ...] = tuple(Mode)  # what a row may hold
TIMINGS: tuple[Timing, ...] = tuple(Timing)


class DType(_StrEnum):
    """The q/k/v dtype of a sweep (the K|V cache's too); fp32 is the reference's own precision."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
