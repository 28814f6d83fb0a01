"""torch.profiler Chrome traces of an engine (``*.trace.json`` / ``*.trace.json.gz``, as SGLang's
``/start_profile`` or ``SGLANG_TORCH_PROFILER_DIR`` write one per rank), read into a
:class:`~cpbench.studies.engine_traces.rank_trace.RankTrace`: streamed with ijson, so a multi-GB trace is never held whole
in memory; only GPU kernels, launch calls and annotation ranges are kept. The rank, world size and process
groups come from kineto's ``distributedInfo``; the start time from ``baseTimeNanoseconds`` plus the first
event's ``ts`` (older kineto writes absolute µs in ``ts`` and no base).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import replace
from pathlib import Path

from cpbench.profiles.kernels import CALL_KERNEL, CALL_NAMES
from cpbench.studies.engine_traces.rank_trace import (Kernel, RankTrace, Span, TraceInputError, finite_number, first_line,
                                          nonneg_int)

KERNEL_CAT = "kernel"
HOST_RANGE_CATS = ("user_annotation",)  # record_function ranges and ProfilerStep#N (host side)
GPU_RANGE_CATS = ("gpu_user_annotation",)  # their GPU-side copies
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
CALL_CORRELATION = 1 << 48  # the first pseudo-correlation id of an attention-call range (see _calls_as_kernels)


def _open(f: Path):
    with open(f, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(f, "rb") if gz else open(f, "rb")


def read_torch_trace(f: str | Path) -> RankTrace:
    """One torch.profiler Chrome trace (plain or gz), streamed (ijson).

    Kept: ``kernel`` events (name, ts, dur µs, ``args.correlation``), launch calls (``cuda_runtime`` /
    ``cuda_driver``: correlation -> ts), ``user_annotation`` and ``gpu_user_annotation`` ranges.
    A trace without GPU kernels that holds cpbench's attention-call ranges (its own profile on a CPU) is counted by
    those calls instead (``counted`` ``"attention calls"``).

    Raises:
        TraceInputError: not JSON, a truncated gz, no ``traceEvents``, or no GPU kernel and no attention-call range
            (a CPU-only program).
    """
    import ijson

    f = Path(f)
    t = RankTrace(path=str(f), label=f.name, source="torch.profiler")
    meta = _torch_meta(f)
    info = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    t.rank, t.world_size = nonneg_int(info.get("rank")), nonneg_int(info.get("world_size"))
    t.group = (info.get("backend"), t.world_size)
    t.process_groups = _process_groups(info.get("pg_config"))
    base = meta.get("baseTimeNanoseconds")
    first = float("inf")
    seen_events = False
    try:
        with _open(f) as fh:
            for ev in ijson.items(fh, "traceEvents.item", use_float=True):
                seen_events = True
                if not isinstance(ev, dict) or ev.get("ph", "X") != "X":
                    continue
                ts, dur, name = ev.get("ts"), ev.get("dur"), ev.get("name")
                cat = str(ev.get("cat") or "").lower()
                good = finite_number(ts) and isinstance(name, str) and name
                if cat == KERNEL_CAT:
                    if good and finite_number(dur) and dur >= 0:
                        first = min(first, ts)
                        t.kernels.append(Kernel(name, float(ts), float(dur), _correlation(ev), _device(ev)))
                    else:
                        t.malformed += 1
                    continue
                if not good:
                    continue
                first = min(first, ts)
                dur = float(dur) if finite_number(dur) and dur >= 0 else 0.0
                t.host_events += 1
                if cat in LAUNCH_CATS and _correlation(ev) is not None:
                    t.launches[_correlation(ev)] = float(ts)
                elif cat in HOST_RANGE_CATS:
                    t.host_ranges.append(Span(name, float(ts), float(ts) + dur))
                elif cat in GPU_RANGE_CATS:
                    t.gpu_ranges.append(Span(name, float(ts), float(ts) + dur))
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise _unreadable(f, e) from None
    if not seen_events:
        raise TraceInputError(f"{str(f)!r} has no traceEvents: it is not a torch.profiler trace")
    if not t.kernels and not t.malformed:
        _calls_as_kernels(t)
    if not t.kernels:
        bad = f", {t.malformed} kernel events without a name, start or duration" if t.malformed else ""
        raise TraceInputError(f"{str(f)!r} holds no GPU kernel ({t.host_events} CPU events{bad}): a trace of a "
                              "CPU-only program, or profiled without ProfilerActivity.CUDA")
    if first != float("inf"):
        t.start_us = (base / 1000.0 if isinstance(base, (int, float)) else 0.0) + first
    t.kernels.sort(key=lambda k: k.ts)
    if t.rank is not None:
        t.label = f"rank {t.rank} ({f.name})"
    return t


def _calls_as_kernels(t: RankTrace) -> None:
    """A trace without GPU kernels that holds cpbench's attention-call ranges (``prev``/``next``/``combined``, as
    ``cpbench profile`` writes them on a CPU) is counted by those: each range becomes a pseudo-kernel (name
    ``CALL_KERNEL + range``, its host interval, launched where it starts), and ``t.counted`` says so."""
    calls = sorted((r for r in t.host_ranges if r.name in CALL_NAMES), key=lambda r: r.ts)
    for i, r in enumerate(calls):
        corr = CALL_CORRELATION + i  # far above any CUPTI correlation id: no real launch call shares it
        t.kernels.append(Kernel(CALL_KERNEL + r.name, r.ts, r.end - r.ts, corr))
        t.launches[corr] = r.ts
    if calls:
        t.counted = "attention calls"


def split_by_device(t: RankTrace) -> list[RankTrace]:
    """``t`` as one trace per GPU its kernels ran on (kineto's ``args.device``), when there are several: a process
    that drove several GPUs. Each part keeps the process's launch calls and ranges, is labelled ``device D (file)``,
    numbered in device order (``rank_source`` ``device order``), with no world size (the process's is not the
    parts'). ``[t]`` for a trace of one device."""
    devices = sorted({k.device for k in t.kernels if k.device is not None})
    if len(devices) < 2:
        return [t]
    name = Path(t.path).name
    return [replace(t, label=f"device {d} ({name})", rank=i, rank_source="device order", world_size=None,
                    kernels=[k for k in t.kernels if k.device == d]) for i, d in enumerate(devices)]


def _device(ev: dict) -> int | None:
    args = ev.get("args")
    return nonneg_int(args.get("device")) if isinstance(args, dict) else None


def _process_groups(pg_config) -> dict[str, tuple]:
    """``distributedInfo.pg_config`` (a list of ``{pg_name, ranks, ...}``) as ``pg_name -> ranks``; entries without
    a name or a list of ranks are left out (kineto of some versions writes none)."""
    out = {}
    for pg in pg_config if isinstance(pg_config, list) else ():
        if isinstance(pg, dict) and pg.get("pg_name") is not None and isinstance(pg.get("ranks"), list):
            out[str(pg["pg_name"])] = tuple(pg["ranks"])
    return out


def _torch_meta(f: Path) -> dict:
    """The top-level keys kineto writes before ``traceEvents`` (distributedInfo, baseTimeNanoseconds);
    stops at ``traceEvents`` so the events are not parsed twice."""
    import ijson

    meta: dict = {}
    try:
        with _open(f) as fh:
            parser = ijson.parse(fh, use_float=True)
            builder, key = None, None
            for prefix, event, value in parser:
                if prefix == "" and event == "map_key":
                    if value == "traceEvents":
                        break
                    key, builder = value, ijson.ObjectBuilder()
                elif builder is not None and prefix != "":
                    builder.event(event, value)
                    if prefix == key and event not in ("start_map", "start_array", "map_key"):
                        meta[key], builder = builder.value, None
    except (ijson.JSONError, EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise _unreadable(f, e) from None
    return meta


def _unreadable(f: Path, e: BaseException) -> TraceInputError:
    """The one-line error for a torch trace the parser or gzip gave up on: cut short, or not JSON at all."""
    why = first_line(e)
    if isinstance(e, EOFError) or "premature EOF" in why or "end-of-stream" in why:
        return TraceInputError(f"{str(f)!r} is cut short ({why}): give the whole file as the profiler wrote it")
    return TraceInputError(f"{str(f)!r} is not a torch.profiler trace ({why}): give the file as the profiler wrote "
                           "it (JSON, plain or gz)")


def _correlation(ev: dict) -> int | None:
    args = ev.get("args")
    return nonneg_int(args.get("correlation")) if isinstance(args, dict) else None
