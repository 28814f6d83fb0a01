"""Whether a rank of an engine took the fused or the two-call path: its attention kernels per forward
(:mod:`cpbench.studies.engine_traces.forwards`), judged only where something says the rank ran context parallelism.

Without CP a forward runs one attention call per layer, so 36 attention kernels per forward of a 36-layer model
are what the fused path gives *and* what a plain run gives: the count alone cannot say the fused path was taken.
What says whether the rank ran CP, first match wins:

1. the user: ``--cp N`` (or the cp size of ``--cell``); N = 1 is no CP;
2. the trace's ``distributedInfo``: world size 1 is a single process, so no CP;
3. all-gather collective kernels, at least one per layer in every forward: what CP's per-layer K|V all-gather
   launches (tensor parallelism all-reduces instead).

Without any of them the verdict says what the count is consistent with and asks for ``--cp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbench.studies.engine_traces.forwards import RankForwards


@dataclass(frozen=True)
class CpEvidence:
    """Whether a rank ran context parallelism.

    Attributes:
        cp: True (CP), False (no CP) or None (nothing in the trace or the command says).
        why: what says so, as the verdict quotes it (``"--cp 4"``, ``"world size 1 in distributedInfo"``,
            ``"36 all-gathers per forward"``); empty when ``cp`` is None.
    """

    cp: bool | None
    why: str = ""


NO_EVIDENCE = CpEvidence(None)


def cp_evidence(rank: RankForwards, num_layers: int, cp_size: int | None = None, given: str = "") -> CpEvidence:
    """What says whether ``rank`` ran CP (the module's order).

    Args:
        rank: one rank's forwards.
        num_layers: attention layers per forward.
        cp_size: the CP size the user gave (``--cp``, or ``--cell``'s), or None.
        given: how the user gave it, quoted by the verdict (``"--cp 4"``); default ``"--cp <cp_size>"``.
    """
    if cp_size is not None:
        return CpEvidence(cp_size > 1, given or f"--cp {cp_size}")
    if rank.trace.world_size == 1:
        return CpEvidence(False, "world size 1 in distributedInfo")
    gathers = min((f.all_gathers for f in rank.forwards), default=0)
    if rank.forwards and gathers >= num_layers:
        return CpEvidence(True, f"{gathers} all-gathers per forward, at least one per layer")
    return NO_EVIDENCE


def verdict(per_forward: list[int], num_layers: int, evidence: CpEvidence = NO_EVIDENCE) -> str:
    """The one-line verdict on a rank's forwards.

    With CP evidence: ``"fused path taken: 36 attention kernels per forward (1 per layer; CP: --cp 4)"`` or
    ``"two-call: 72 attention kernels per forward (2 per layer; CP: ...)"``. With evidence of no CP, the count is
    said as a run without CP. Without evidence: ``"36 attention kernels per forward: consistent with one call per
    layer; no evidence of CP in this trace, pass --cp to judge fusion"``. Forwards that disagree, or a count that
    is neither, are said as such.
    """
    if not per_forward:
        return "no prefill forward found"
    counts = sorted(set(per_forward))
    if len(counts) > 1:
        return f"forwards differ: {', '.join(map(str, counts))} attention kernels per forward"
    n = counts[0]
    calls = {num_layers: "one call", 2 * num_layers: "two calls"}.get(n)
    if calls is None:
        return (f"{n} attention kernels per forward ({n / num_layers:g} per layer over {num_layers} layers): "
                "neither path's count")
    if evidence.cp is None:
        return (f"{n} attention kernels per forward: consistent with {calls} per layer; no evidence of CP in this "
                "trace, pass --cp to judge fusion")
    if evidence.cp is False:
        return f"no CP ({evidence.why}): {n} attention kernels per forward, {calls} per layer"
    if n == num_layers:
        return f"fused path taken: {n} attention kernels per forward (1 per layer; CP: {evidence.why})"
    return f"two-call: {n} attention kernels per forward (2 per layer; CP: {evidence.why})"
