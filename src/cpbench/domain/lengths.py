"""Request lengths of a sweep as a deployment sees them (no torch): seeded length mixes, request traces,
prefix-cache hits, and the batches of ``bs`` requests they are cut into.

A request is ``(extend_len, prefix_len)`` in tokens: the new tokens prefill computes and the cached
prefix it reads (SGLang: ``extend_seq_lens`` and ``extend_prefix_lens``; ``seq_lens`` is their sum).
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cpbench.errors import CpbenchInputError
from cpbench.domain.jsonfile import loads, read_user_text
from cpbench.domain.limits import MAX_TOKENS  # the bound of every length option

MAX_REQUESTS = 1 << 20
DEFAULT_BATCHES = 4  # batches per --bs value drawn from a distribution
# trace columns: (request tokens, cached tokens). "extend_len" counts new tokens only (the cached prefix
# comes on top); "input_len" (SGLang bench_serving) and "prompt_tokens" (OpenAI-style usage) count the whole
# prompt, of which "cached_len" / "cached_tokens" were already cached.
TRACE_COLUMNS = (("extend_len", "prefix_len"), ("input_len", "cached_len"), ("prompt_tokens", "cached_tokens"))

Batch = tuple[tuple[int, ...], tuple[int, ...]]  # (extend_lens, prefix_lens) of one batch


@dataclass(frozen=True)
class LengthMix:
    """A ``--lengths`` value: ``kind`` ``uniform`` (``params = (lo, hi)``, tokens, inclusive), ``lognormal``
    (``params = (median, sigma)``: median tokens and the sd of the log) or ``list`` (the lengths in order)."""

    kind: str
    params: tuple[float, ...]

    @property
    def drawn(self) -> bool:
        return self.kind != "list"


def parse_lengths(text: str) -> LengthMix:
    """Parse ``--lengths``: ``dist:uniform:LO:HI``, ``dist:lognormal:MEDIAN:SIGMA`` or a fixed list
    ``3000,8192,500`` (tokens per request, in order).

    Raises:
        CpbenchInputError: another form, a length outside ``[1, 2**24]``, ``LO > HI``, a median < 1 or a
            sigma outside ``[0, 4]``.
    """
    t = str(text).strip()
    if not t.startswith("dist:"):
        try:
            vals = [int(x) for x in t.split(",") if x.strip()]
        except ValueError:
            vals = []
        if not vals:
            raise CpbenchInputError(f"--lengths {text!r} is not a list of lengths nor dist:uniform:LO:HI / "
                                    "dist:lognormal:MEDIAN:SIGMA: e.g. --lengths dist:lognormal:4096:1.0")
        _check_range(vals, "--lengths")
        return LengthMix("list", tuple(vals))
    parts = t.split(":")
    try:
        name, a, b = parts[1], float(parts[2]), float(parts[3])
        if len(parts) != 4:
            raise ValueError
    except (IndexError, ValueError):
        raise CpbenchInputError(f"--lengths {text!r}: use dist:uniform:LO:HI or dist:lognormal:MEDIAN:SIGMA "
                                "(numbers of tokens; SIGMA is the sd of the log)") from None
    if name == "uniform":
        if not (math.isfinite(a) and math.isfinite(b)) or a != int(a) or b != int(b) or a > b:
            raise CpbenchInputError(f"--lengths {text!r}: LO and HI must be integers with LO <= HI")
        _check_range([int(a), int(b)], "--lengths")
        return LengthMix("uniform", (int(a), int(b)))
    if name == "lognormal":
        if not (1 <= a <= MAX_TOKENS) or not (0 <= b <= 4):
            raise CpbenchInputError(f"--lengths {text!r}: MEDIAN must be in [1, {MAX_TOKENS}] tokens and SIGMA "
                                    "in [0, 4]")
        return LengthMix("lognormal", (a, b))
    raise CpbenchInputError(f"--lengths {text!r}: unknown distribution {name!r}: use uniform or lognormal")


def _check_range(vals: Sequence[int], what: str) -> None:
    bad = [v for v in vals if not 1 <= v <= MAX_TOKENS]
    if bad:
        raise CpbenchInputError(f"{what} lengths must be in [1, {MAX_TOKENS}] tokens, got {bad[0]}")


def draw(mix: LengthMix, n: int, rng: random.Random) -> list[int]:
    """``n`` request lengths (tokens) from ``mix`` using ``rng`` (Python's Mersenne Twister, so a seed gives
    the same lengths on every platform). Lognormal draws are rounded and clipped to ``[1, 2**24]``."""
    if mix.kind == "uniform":
        return [rng.randint(int(mix.params[0]), int(mix.params[1])) for _ in range(n)]
    if mix.kind == "lognormal":
        mu, sigma = math.log(mix.params[0]), mix.params[1]
        return [min(MAX_TOKENS, max(1, round(rng.lognormvariate(mu, sigma)))) for _ in range(n)]
    return list(mix.params[:n])


def with_prefix_hit(tokens: Sequence[int], rate: float) -> list[tuple[int, int]]:
    """Requests ``(extend_len, prefix_len)`` of prompts of ``tokens`` tokens of which a fraction ``rate`` is
    already cached: ``prefix_len = floor(rate * tokens)``, ``extend_len = tokens - prefix_len`` (>= 1 for
    ``rate < 1``). Raises CpbenchInputError for a rate outside ``[0, 1)``."""
    if not 0 <= rate < 1:  # NaN fails too
        raise CpbenchInputError(f"--prefix-hit must be a fraction in [0, 1), e.g. 0.5, got {rate}")
    out = []
    for t in tokens:
        p = math.floor(rate * t)
        out.append((t - p, p))
    return out


def read_trace(path: str | Path) -> tuple[list[int], list[int] | None]:
    """Read a request trace: CSV with a header row, or JSONL (one JSON object per line), one request per line.

    Columns (any other column is ignored): ``extend_len`` [+ ``prefix_len``] (new tokens, cached tokens on
    top), or ``input_len`` [+ ``cached_len``] / ``prompt_tokens`` [+ ``cached_tokens``] (the whole prompt,
    of which the second column was cached). Blank lines and lines starting with ``#`` are skipped.

    Returns:
        ``(extend_lens, prefix_lens)``; ``prefix_lens`` is None when the trace has no cached column.
    Raises:
        CpbenchInputError: unreadable file, no known length column, a value that is not an integer, a
            length out of range, a cached count >= the prompt, an empty trace.
    """
    if not str(path).strip():
        raise CpbenchInputError("--trace is empty: give a CSV or JSONL file of requests")
    p = Path(path)
    text = read_user_text(p, "--trace")  # a FIFO or a device would block or never end: refused
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise CpbenchInputError(f"--trace {str(p)!r} holds no requests: one request per line (CSV or JSONL)")
    if lines[0][1].lstrip().startswith("["):  # JSON arrays: no column names to read the lengths by
        raise CpbenchInputError(f"--trace {str(p)!r} line {lines[0][0]} is a JSON array: write one JSON object per "
                                'line with named lengths, e.g. {"extend_len": 2048, "prefix_len": 0}')
    if lines[0][1].lstrip().startswith("{"):
        records = []
        for n, ln in lines:
            obj = loads(ln, f"--trace {str(p)!r} line {n}")
            if not isinstance(obj, dict):
                raise CpbenchInputError(f"--trace {str(p)!r} line {n} is not a JSON object")
            records.append((n, obj))
    else:
        reader = csv.DictReader(io.StringIO("\n".join(ln for _, ln in lines)))
        records = [(n, {k.strip(): v for k, v in row.items() if k}) for (n, _), row in zip(lines[1:], reader)]
        if not records:
            raise CpbenchInputError(f"--trace {str(p)!r} has a header but no requests")
    keys = set(records[0][1])
    pair = next((c for c in TRACE_COLUMNS if c[0] in keys), None)
    if pair is None:
        raise CpbenchInputError(f"--trace {str(p)!r} has none of the columns "
                                f"{', '.join(c[0] for c in TRACE_COLUMNS)}: name the request's tokens with one "
                                f"of them (cached tokens, optional: {', '.join(c[1] for c in TRACE_COLUMNS)})")
    if len(records) > MAX_REQUESTS:
        raise CpbenchInputError(f"--trace {str(p)!r} holds {len(records)} requests, more than {MAX_REQUESTS}")
    tok_col, cached_col = pair
    cached = cached_col in keys
    ext, pre = [], []
    for n, rec in records:
        t = _int(rec.get(tok_col), p, n, tok_col)
        c = _int(rec.get(cached_col), p, n, cached_col) if cached else 0
        if tok_col == "extend_len":
            e = t
        elif c >= t:
            raise CpbenchInputError(f"--trace {str(p)!r} line {n}: {cached_col} {c} must be < {tok_col} {t} "
                                    "(prefill needs at least one new token)")
        else:
            e = t - c
        if not 1 <= e <= MAX_TOKENS or not 0 <= c <= MAX_TOKENS:
            raise CpbenchInputError(f"--trace {str(p)!r} line {n}: lengths must be in [1, {MAX_TOKENS}] tokens "
                                    f"(new) and [0, {MAX_TOKENS}] (cached)")
        ext.append(e)
        pre.append(c)
    return ext, (pre if cached else None)


def _int(v, path: Path, line: int, col: str) -> int:
    if isinstance(v, bool):
        v = None
    try:
        if isinstance(v, float) and v != int(v):
            raise ValueError
        return int(v.strip()) if isinstance(v, str) else int(v)
    except (TypeError, ValueError, OverflowError):  # 1e400 in JSON is inf
        raise CpbenchInputError(f"--trace {str(path)!r} line {line}: {col} must be an integer "
                                f"number of tokens, got {v!r}") from None


def cut(extend_lens: Sequence[int], prefix_lens: Sequence[int], bs: int, limit: int | None = None) -> list[Batch]:
    """Consecutive batches of ``bs`` requests (the last may be shorter), at most ``limit`` of them."""
    out = []
    for i in range(0, len(extend_lens), bs):
        if limit is not None and len(out) >= limit:
            break
        out.append((tuple(extend_lens[i:i + bs]), tuple(prefix_lens[i:i + bs])))
    return out


def plan_batches(bs_list: Sequence[int], *, mix: LengthMix | None = None,
                 trace: tuple[list[int], list[int] | None] | None = None, prefix: int = 0,
                 prefix_hit: float | None = None, batches: int | None = None, seed: int = 0) -> list[Batch]:
    """The batches of a length mix or a trace, for every ``bs`` in ``bs_list`` in that order.

    A distribution draws ``batches`` (default 4) batches of ``bs`` requests per ``bs`` from one
    ``random.Random(seed)``; a fixed list or a trace is cut in order into batches of ``bs`` (at most
    ``batches``). Request lengths are prompt tokens: ``prefix_hit`` caches a fraction of each
    (:func:`with_prefix_hit`), else ``prefix`` cached tokens come on top. A trace's own cached column
    excludes both.

    Raises:
        CpbenchInputError: both or neither of ``mix``/``trace``; ``--prefix``/``--prefix-hit`` with a trace
            that gives cached lengths, or together; a bad rate.
    """
    if (mix is None) == (trace is None):
        raise CpbenchInputError("give one of --lengths and --trace")
    if prefix and prefix_hit is not None:
        raise CpbenchInputError("--prefix and --prefix-hit both set the cached prefix: keep one")
    if trace is not None and trace[1] is not None and (prefix or prefix_hit is not None):
        raise CpbenchInputError("the trace gives each request's cached length: drop --prefix / --prefix-hit")

    def requests(tokens: list[int]) -> tuple[list[int], list[int]]:
        if prefix_hit is not None:
            pairs = with_prefix_hit(tokens, prefix_hit)
            return [e for e, _ in pairs], [p for _, p in pairs]
        return list(tokens), [prefix] * len(tokens)

    out: list[Batch] = []
    if mix is not None and mix.drawn:
        rng = random.Random(seed)
        n = DEFAULT_BATCHES if batches is None else batches
        for bs in bs_list:
            out += cut(*requests(draw(mix, n * bs, rng)), bs)
        return out
    if mix is not None:
        ext, pre = requests(list(mix.params))
    else:
        ext, pre = trace[0], trace[1]
        if pre is None:
            ext, pre = requests(ext)
    for bs in bs_list:
        out += cut(ext, pre, bs, batches)
    return out
