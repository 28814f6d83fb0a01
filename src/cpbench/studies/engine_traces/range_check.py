"""Whether a ``--forward-range`` bounded forwards at all: a range the user names must match something, and what it
matches must be whole forwards, not layers. (:func:`cpbench.studies.engine_traces.forwards.find_forwards` already keeps
the outermost of nested matches.)
"""

from __future__ import annotations

import re
from collections import Counter

from cpbench.studies.engine_traces.forwards import RankForwards
from cpbench.studies.engine_traces.rank_trace import RankTrace

SEEN_SHOWN = 8  # range names (as globs) a refusal lists
_DIGITS = re.compile(r"\d+")
_LAYER = re.compile(r"layer", re.IGNORECASE)  # layer_3, model.layers.3, DecoderLayer, layer0


def as_glob(name: str) -> str:
    """A glob matching range ``name`` and its numbered siblings: ``[``, ``?`` and ``*`` made literal (``[[]``, ...),
    digit runs as ``*``: ``"step[EXTEND bs=15]"`` -> ``"step[[]EXTEND bs=*]"``, ``"ProfilerStep#6"`` -> ``"ProfilerStep#*"``."""
    literal = "".join(f"[{ch}]" if ch in "[?*" else ch for ch in name)
    return _DIGITS.sub("*", literal)


def ranges_seen(traces: list[RankTrace]) -> str:
    """The host range names of ``traces`` as globs (:func:`as_glob`), most frequent first:
    ``"'layer_*' x8, 'ProfilerStep#*' x2"``; ``"none"`` without ranges."""
    seen = Counter(as_glob(r.name) for t in traces for r in t.host_ranges)
    shown = [f"{name if len(name) <= 120 else name[:117] + '...'!r} x{n}"
             for name, n in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[:SEEN_SHOWN]]
    more = f", and {len(seen) - SEEN_SHOWN} more" if len(seen) > SEEN_SHOWN else ""
    return ", ".join(shown) + more if shown else "none"


def check_forward_range(ranks: list[RankForwards], forward_range: str, num_layers: int, given: bool) -> None:
    """Refuse a forward range that bounds no forward.

    Args:
        ranks: every rank's forwards, found with ``forward_range``.
        forward_range: the glob; given: the user named it (``--forward-range``), so it must match.
        num_layers: attention layers per forward.
    Raises:
        ValueError (one line, for ``--forward-range: ...``): a given range matched no range in any trace (the
            ranges seen are listed); the ranges that bound forwards are named as layers; or, for a given range,
            every one of them holds fewer attention kernels than the model has layers.
    """
    traces = [r.trace for r in ranks]
    if given and not any(r.ranges_matched for r in ranks):
        raise ValueError(f"--forward-range {forward_range!r} matched no range in {len(traces)} trace(s); ranges seen: "
                         f"{ranges_seen(traces)}: give one of them (a glob), or leave --forward-range out to bound "
                         "forwards by profiler steps or the layer count")
    bounded = [f for r in ranks for f in r.forwards if f.bound == "annotation"]
    if not bounded:
        return
    names = sorted({f.name for f in bounded})
    if all(_LAYER.search(n) for n in names):
        raise ValueError(f"--forward-range {forward_range!r} matches per-layer ranges ({', '.join(map(repr, names[:3]))}"
                         f"{', ...' if len(names) > 3 else ''}), not forwards: give the range of a whole forward "
                         f"(ranges seen: {ranges_seen(traces)})")
    short = [f for f in bounded if f.attention_kernels < num_layers]
    if given and len(short) == len(bounded):
        raise ValueError(f"--forward-range {forward_range!r} matches ranges that hold fewer attention kernels than the "
                         f"model's {num_layers} layers ({short[0].attention_kernels} in {short[0].name!r}): per-layer or "
                         "per-call ranges, or the wrong --model/--layers; give the range of a whole forward "
                         f"(ranges seen: {ranges_seen(traces)})")
