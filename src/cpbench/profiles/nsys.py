"""Nsight Systems cross-check: run a child under ``nsys`` and read kernels per NVTX range back.

Flow (the CLI, ``cli/profile.py``, owns the subprocesses; this module only builds argv and parses text)::

    nsys = find_nsys()                                    # None -> say "nsys not found", skip
    subprocess.run(nsys_profile_argv(base, child, nsys))  # child wraps its forward in
                                                          # cuda_profiler_range() + annotated_forward
    rep = report_path(base)                               # ProfileError on a bare .qdstrm: see
                                                          # find_qdstrm_importer / import_qdstrm_argv
    csv = subprocess.run(stats_argv(rep, nsys), capture_output=True, text=True).stdout
    per_range = kernels_per_range(parse_nvtx_kern_sum(csv), prepared.kernel_patterns)
    per_range["prev"].attention  # attention kernels launched inside all "prev" ranges

Assumptions about ``nsys stats -r nvtx_kern_sum --format csv`` (nsys 2023.4-2025.x; the report
script's own SQL names the columns):

- Lines before the CSV header are not CSV ("Processing [...] with [...]...", "NOTICE: ...", blank
  lines); the header is the first line naming both a range column and a kernel-name column.
- Columns: ``NVTX Range, Style, PID, TID, NVTX Inst, Kern Inst, Total Time (ns), Avg (ns),
  Med (ns), Min (ns), Max (ns), StdDev (ns), Kernel Name``. Matching is by normalised name
  (lower case, units and punctuation dropped), so ``Range``/``Name``, ``Instances``, ``Total Time``
  and ``(us)`` variants also parse. Numbers may carry thousands separators.
- ``NVTX Range`` is ``<domain>:<text>`` (empty domain for the default one, so ``:text``); ncu writes
  ``<domain>@<text>``. Both prefixes are stripped for ``range``; ``domain`` keeps the domain.
- A kernel launched inside nested push/pop ranges counts once in EVERY enclosing range (the whole-
  forward range, ``layer{i}`` and the call), and rows group by range *name*: ``prev`` sums the prev
  calls of all layers. Kernels launched outside any range have an empty range name.
- The CSV holds one table; a second table (several ``-r``) ends at the next blank line.
- ``--force-export true`` is needed: with a stale ``.sqlite`` beside the report, nsys 2025.3 prints
  a warning and its usage instead of the table.

Checked on the H200 (nsys 2025.3.1 from Nsight Compute, torch reference forward): the header is
exactly the list above, unquoted; names are ``cpbench:<range>``; stdout starts with "Generating
SQLite file ..." and "Processing [...] with [...nvtx_kern_sum.py]..." (tests/fixtures/
h200_nsys_torch_nvtx_kern_sum.csv). Because rows group by range *name*, capture one cell (cp, bs,
seq, rank) per report: ``prev``/``next``/``combined`` then belong to that cell's two-call/fused
forward, the cell-label range gives each forward's totals, and ``layer{i}`` mixes both modes.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from cpbench.profiles.kernels import KINDS, KernelCounts, ProfileError, classify

NSYS_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/*/nsys",
)


def find_nsys() -> str | None:
    """Path of an ``nsys`` executable, or None.

    Order: ``$PATH``; a full Nsight Systems install (``/opt/nvidia/nsight-systems*/.../bin/nsys``);
    the CUDA toolkit's; last the copy inside Nsight Compute (``/opt/nvidia/nsight-compute/<ver>/host/
    <target>/nsys``), which can record but on some machines cannot turn the ``.qdstrm`` into a
    report (no QdstrmImporter beside it; see :func:`report_path`). Newest version first per pattern.
    """
    return find_tool("nsys", NSYS_GLOBS)


def find_tool(name: str, patterns) -> str | None:
    """``name`` on ``$PATH``, else the first executable file matching ``patterns`` (glob patterns of
    install folders, tried in order; the newest version first within a pattern); None when none."""
    hit = shutil.which(name)
    if hit:
        return hit
    for pattern in patterns:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def nsys_profile_argv(out_base: Path, child_argv: list[str], nsys: str = "nsys",
                      graph_nodes: bool = True) -> list[str]:
    """argv recording ``child_argv`` with CUDA + NVTX tracing, only between the child's
    ``cudaProfilerStart`` / ``cudaProfilerStop`` (see :func:`cuda_profiler_range`).

    Args:
        out_base: report path without extension (nsys adds ``.nsys-rep``).
        child_argv: the program to run, e.g. ``[sys.executable, "-m", "cpbench", ...]``.
        nsys: the executable (:func:`find_nsys`).
        graph_nodes: ``--cuda-graph-trace=node`` so kernels inside CUDA-graph replays are listed
            one by one (nsys >= 2022.5); False keeps nsys' default (one row per graph).
    CPU sampling and context-switch tracing are off: smaller reports, no perf permissions needed.
    """
    argv = [nsys, "profile", "-t", "cuda,nvtx", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--sample=none", "--cpuctxsw=none",
            "-o", str(out_base), "--force-overwrite", "true"]
    if graph_nodes:
        argv.append("--cuda-graph-trace=node")
    return argv + list(child_argv)


def stats_argv(rep: Path, nsys: str = "nsys") -> list[str]:
    """argv printing the NVTX range kernel summary of report ``rep`` as CSV on stdout."""
    return [nsys, "stats", "-r", "nvtx_kern_sum", "--format", "csv", "--force-export", "true", str(rep)]


def find_qdstrm_importer(nsys: str | None = None) -> str | None:
    """Path of ``QdstrmImporter`` (turns a ``.qdstrm`` recording into a ``.nsys-rep``), or None.

    Looks on ``$PATH``, then in the host folders beside ``nsys`` (``<ver>/host/*/QdstrmImporter`` in
    Nsight Compute's copy, ``<ver>/host-linux-x64/QdstrmImporter`` in Nsight Systems).
    """
    hit = shutil.which("QdstrmImporter")
    if hit:
        return hit
    nsys = nsys or find_nsys()
    if not nsys:
        return None
    root = Path(nsys).resolve().parent.parent
    for path in sorted(glob.glob(str(root / "*" / "QdstrmImporter")), reverse=True):
        if os.access(path, os.X_OK):
            return path
    return None


def import_qdstrm_argv(qdstrm: Path, importer: str) -> list[str]:
    """argv converting ``qdstrm`` into ``<same name>.nsys-rep`` (overwriting)."""
    return [importer, "-f", "-i", str(qdstrm)]


def report_path(out_base: Path) -> Path:
    """The ``.nsys-rep`` that :func:`nsys_profile_argv` made for ``out_base``.

    Raises:
        ProfileError: no report. When only ``<out_base>.qdstrm`` is there, nsys recorded but its
            importer failed; seen on the H200 image with the nsys inside Nsight Compute 2025.3.1,
            whose QdstrmImporter needs ``libdw.so.1`` (elfutils): install libdw1 or put it on
            ``LD_LIBRARY_PATH``, then run :func:`import_qdstrm_argv` and call this again.
    """
    base = Path(out_base)
    rep = base.with_name(base.name + ".nsys-rep")
    if rep.exists():
        return rep
    qd = base.with_name(base.name + ".qdstrm")
    if qd.exists():
        raise ProfileError(f"nsys recorded {qd.name} but made no {rep.name}: its QdstrmImporter failed "
                           "(needs libdw.so.1 from elfutils); install libdw1, then run "
                           f"'QdstrmImporter -f -i {qd}'")
    raise ProfileError(f"nsys made no report at {rep} (did the child call cudaProfilerStart?)")


class cuda_profiler_range:
    """``with cuda_profiler_range(): ...`` brackets the region nsys records (cudaProfilerStart/Stop).

    Harmless without a profiler attached. Synchronizes the device before stopping so every kernel
    of the region finishes inside the capture.
    """

    def __enter__(self) -> "cuda_profiler_range":
        import torch

        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def _norm(col: str) -> str:
    col = re.sub(r"\([^)]*\)", "", col.lower())  # drop units: "(ns)", "(%)"
    return re.sub(r"[^a-z]", "", col)


# normalised header -> our key; first match wins
_COLUMNS = {
    "nvtxrange": "raw_range", "range": "raw_range", "nvtxrangename": "raw_range",
    "style": "style", "pid": "pid", "tid": "tid",
    "nvtxinst": "nvtx_instances", "nvtxinstances": "nvtx_instances", "rangeinst": "nvtx_instances",
    "kerninst": "kernel_instances", "kernelinst": "kernel_instances",
    "kernelinstances": "kernel_instances", "instances": "kernel_instances",
    "totaltime": "total_time", "kernelname": "kernel_name", "kernel": "kernel_name", "name": "kernel_name",
}
_INTS = ("pid", "tid", "nvtx_instances", "kernel_instances")


def _num(text: str) -> float:
    t = (text or "").strip().replace(",", "")
    try:
        return float(t) if t else 0.0
    except ValueError:
        return 0.0


def split_range_name(raw: str) -> tuple[str, str]:
    """``"cpbench:layer0"`` / ``"cpbench@layer0"`` -> ``("cpbench", "layer0")``; ``":prev"`` ->
    ``("", "prev")``; a name with spaces before any separator is kept whole (``("", raw)``)."""
    raw = (raw or "").strip()
    m = re.match(r"^([^\s:@]*)[:@](.*)$", raw)
    return (m.group(1), m.group(2)) if m else ("", raw)


def parse_nvtx_kern_sum(csv_text: str) -> list[dict]:
    """Rows of an ``nvtx_kern_sum`` CSV (module doc lists the assumptions).

    Returns:
        one dict per row: ``range`` (domain prefix stripped), ``domain``, ``raw_range``, ``style``,
        ``pid``, ``tid``, ``nvtx_instances``, ``kernel_instances`` (ints), ``total_time`` (float, in
        the report's unit, ns by default), ``kernel_name``.
    Raises:
        ProfileError: no header with a range and a kernel-name column.
    """
    lines = csv_text.splitlines()
    start = None
    for i, line in enumerate(lines):
        cols = {_COLUMNS.get(_norm(c)) for c in next(csv.reader([line]), [])}
        if "raw_range" in cols and "kernel_name" in cols:
            start = i
            break
    if start is None:
        raise ProfileError("no nvtx_kern_sum table in the nsys stats output (was the report "
                           "recorded with -t cuda,nvtx and did any kernel run inside a range?)")
    body = []
    for line in lines[start:]:
        if not line.strip():
            break
        body.append(line)
    reader = csv.reader(io.StringIO("\n".join(body)))
    header = [_COLUMNS.get(_norm(c)) for c in next(reader)]
    rows = []
    for rec in reader:
        row: dict = {}
        for key, val in zip(header, rec):
            if key and key not in row:
                row[key] = val
        row.setdefault("raw_range", "")
        row.setdefault("kernel_name", "")
        for k in _INTS:
            row[k] = int(_num(row.get(k, "")))
        row["total_time"] = _num(row.get("total_time", ""))
        row["style"] = row.get("style", "")
        row["domain"], row["range"] = split_range_name(row["raw_range"])
        rows.append(row)
    return rows


@dataclass
class RangeKernels(KernelCounts):
    """:class:`KernelCounts` of one NVTX range name, plus ``nvtx_instances`` (the largest NVTX Inst
    of its rows: how many instances of the range contained kernels, a lower bound on instances)
    and ``total_time`` (sum of kernel time, report unit)."""

    nvtx_instances: int = 0
    total_time: float = 0.0
    kind_time: dict[str, float] = field(default_factory=dict)


def kernels_per_range(rows: list[dict], attention_patterns: tuple[str, ...] | list[str] = (),
                      domain: str | None = "cpbench") -> dict[str, RangeKernels]:
    """Kernel counts per range name (``range`` key of :func:`parse_nvtx_kern_sum` rows).

    Args:
        rows: parsed rows (several PIDs/TIDs are summed).
        attention_patterns: as for :func:`~cpbench.profiles.kernels.classify`.
        domain: keep only ranges of this NVTX domain (None: all; rows with no range are dropped).
    ``launches`` and ``attention_calls`` stay 0 (nvtx_kern_sum does not report them).
    """
    out: dict[str, RangeKernels] = {}
    for row in rows:
        if not row["raw_range"] or (domain is not None and row["domain"] != domain):
            continue
        rk = out.setdefault(row["range"], RangeKernels())
        kind = classify(row["kernel_name"], attention_patterns)
        rk.add(row["kernel_name"], kind, row["kernel_instances"])
        rk.nvtx_instances = max(rk.nvtx_instances, row["nvtx_instances"])
        rk.total_time += row["total_time"]
        rk.kind_time[kind] = rk.kind_time.get(kind, 0.0) + row["total_time"]
    return out


__all__ = ["KINDS", "NSYS_GLOBS", "RangeKernels", "cuda_profiler_range", "find_nsys",
           "find_qdstrm_importer", "import_qdstrm_argv", "kernels_per_range", "nsys_profile_argv",
           "parse_nvtx_kern_sum", "report_path", "split_range_name", "stats_argv"]
