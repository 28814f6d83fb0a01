"""cpbench from Python: build a :class:`SweepConfig`, run it with :func:`sweep`, read the :class:`Run`.

    import cpbench
    cfg = cpbench.grid("llama-3.1-8b", cp_sizes=(2,), bs=(1,), extend_lens=(64,), layers=2)
    run = cpbench.sweep(cfg, "runs/notebook")
    run.rows[["cp_size", "rank", "mode", "latency_us_median"]]
    run.critical_path()[["cp_size", "bs", "speedup", "speedup_ci_low", "speedup_ci_high"]]

``cpbench sweep`` is this function with a progress bar and console tables. Bad input raises
:class:`~cpbench.errors.CpbenchInputError` with the one-line message the CLI prints; nothing is measured
before the whole configuration is checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from cpbench.domain.cells import Batch, CellSpec
from cpbench.domain.limits import MAX_BS, MAX_CP_SIZE, MAX_TOKENS, check_ints, check_plan
from cpbench.domain.models import ModelSpec, get_preset, with_overrides
from cpbench.errors import CpbenchInputError
from cpbench.commands.config import SweepConfig, device_defaults

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep torch.profiler's per-step log lines off the terminal

if TYPE_CHECKING:
    import pandas as pd

    from cpbench.commands.sweep import Sweep


@dataclass(frozen=True, repr=False)
class Run:
    """A run directory, read: its rows, manifest and report.

    Attributes:
        path: the run directory (None on a torchrun rank that does not write).
        rows: one row per cell x rank x backend x mode x timing, the derived columns included (µs, bytes,
            tokens; ``cpbench columns`` lists every column with its unit).
        manifest: ``manifest.json`` (environment, config, the timing method, wall times).
        report_path: ``report.md`` when it was written, else None.
        exit_code: what ``cpbench sweep`` would exit with: 0 ok, 1 a mismatch or an error row, 2 nothing ran.
        message: why, when ``exit_code`` is not 0.
    """

    path: Path | None
    rows: "pd.DataFrame"
    manifest: dict = field(default_factory=dict)
    report_path: Path | None = None
    exit_code: int = 0
    message: str = ""

    def __post_init__(self) -> None:
        self.rows.attrs["claim"] = self.claim

    @property
    def claim(self) -> str:
        """What the run's timings claim: ``"functional check, not a benchmark"`` for a CPU run (the report's
        words: its ratios are not speedups), ``"benchmark"`` otherwise."""
        from cpbench.results.verdicts import CPU_CLAIM, GPU_CLAIM, on_cpu

        return CPU_CLAIM if on_cpu(self.manifest) else GPU_CLAIM

    def __repr__(self) -> str:
        """One line: the directory, the row count and statuses, the exit code (not the whole manifest)."""
        counts = self.rows["status"].value_counts().to_dict() if "status" in self.rows else {}
        statuses = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no rows"
        return f"Run({str(self.path)!r}, {len(self.rows)} rows: {statuses}, exit_code={self.exit_code})"

    @classmethod
    def open(cls, path: str | Path) -> "Run":
        """A run directory already on disk. Raises CpbenchInputError for a path that holds no run, or rows that
        lack cpbench's key columns."""
        from cpbench.results.store import load_run

        rows, manifest = load_run(path)
        lacking = [c for c in ("cp_size", "rank", "mode", "status") if c not in rows]
        if lacking:
            raise CpbenchInputError(f"{str(path)!r} holds rows without {', '.join(lacking)}: not rows cpbench sweep "
                                    "wrote; pass a run directory")
        report = Path(path) / "report.md"
        return cls(Path(path), rows, manifest, report if report.is_file() else None)

    def critical_path(self) -> "pd.DataFrame":
        """One row per cell, backend and timing: the slowest rank's two-call and fused latency (µs), the
        speedup with its 95 % interval (results.critical_path), and ``claim`` (:attr:`claim`, also in the
        frame's ``attrs``, with ``attrs["claim_note"]`` saying why for a CPU run): a CPU run's speedups are a
        functional check, not a benchmark."""
        from cpbench.results.critical_path import critical_path
        from cpbench.results.verdicts import CPU_CLAIM, CPU_CLAIM_NOTE

        cp = critical_path(self.rows)
        if not cp.empty:
            cp["claim"] = self.claim
        cp.attrs["claim"] = self.claim
        if self.claim == CPU_CLAIM:
            cp.attrs["claim_note"] = CPU_CLAIM_NOTE
        return cp


@dataclass
class SweepHooks:
    """What a caller sees while a sweep runs (the CLI draws its progress bar with these): ``opened(sweep)``
    once the run directory and manifest exist, ``cell(cell, pass_no)`` before each cell of each pass,
    ``rank()`` after each rank, ``finished(sweep)`` once the tables are written."""

    opened: Callable[["Sweep"], None] = lambda sweep: None
    cell: Callable[[CellSpec, int], None] = lambda cell, pass_no: None
    rank: Callable[[], None] = lambda: None
    finished: Callable[["Sweep"], None] = lambda sweep: None


def sweep(config: SweepConfig, out: str | Path | None = None, *, resume: bool = False, report: bool = True,
          allow_mismatch: bool = False, keep_going: bool = False, group=None, cpu_affinity: str | None = None,
          hooks: SweepHooks | None = None, chart_workers: int | None = 1) -> Run:
    """Measure every cell of ``config`` into the run directory ``out`` (None: ``runs/<timestamp>``).

    Args:
        resume: continue the run in ``out``, skipping rows on disk (the options must match); with ``out``
            None, the newest unfinished run of this configuration in ``runs/`` (``Run.path`` names it).
        report: write ``report.md`` and the charts at the end.
        allow_mismatch / keep_going: a mismatch / an error row does not make ``exit_code`` 1.
        group: where the ranks run (default: every rank in this process, one after another).
        cpu_affinity: a CPU list (``0-7``) this process is pinned to first.
        hooks: progress callbacks (:class:`SweepHooks`).
        chart_workers: processes that draw the report's charts (``report.charts.render_frame``; None: one per core
            on a machine of 4 or more, as the CLI does). More than 1 starts worker processes, which import the
            calling script as ``__mp_main__``: give it an ``if __name__ == "__main__":`` guard first.
    Returns:
        the :class:`Run`; a cell that could not run is a row with its status and reason.
    Raises:
        CpbenchInputError: bad input found before anything is measured (no cell can run, a bad ``out``, a
            resume with other options, or with no ``out`` and no run to resume); a one-line message.
    """
    from cpbench.commands.sweep import Sweep
    from cpbench.studies import timings as study_timings

    hooks = hooks or SweepHooks()
    env_extra = {}
    if cpu_affinity is not None:
        from cpbench.measure.affinity import pin

        cores = pin(cpu_affinity, int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        env_extra["cpu_affinity"] = {"requested": cpu_affinity, "cores": cores}
    run = Sweep.open(config, None if out is None else str(out), resume, group, env_extra=env_extra,
                     timings=study_timings())
    try:
        hooks.opened(run)
        run.run(on_cell=hooks.cell, on_rank=hooks.rank)
        df = run.finish()
        hooks.finished(run)
        if run.run_dir is None:  # a torchrun rank that does not write
            import pandas as pd

            return Run(None, pd.DataFrame())
        report_path = None
        if report:
            from cpbench.report.run_report import write_report
            from cpbench.studies import study_reports

            report_path = write_report(run.run_dir.path, studies=study_reports(), chart_workers=chart_workers)
        code, message = run.exit_code(df, allow_mismatch, keep_going)
        return Run(run.run_dir.path, df, run.run_dir.read_manifest(), report_path, code, message)
    finally:
        run.close()


def grid(model: str | ModelSpec = "llama-3.1-8b", *, cp_sizes: Sequence[int] = (4,), bs: Sequence[int] = (1,),
         extend_lens: Sequence[int] = (2048,), prefix_len: int = 0, backends: str | Sequence[str] = "auto",
         device: str | None = None, layers: int | None = None, **fields) -> SweepConfig:
    """A :class:`SweepConfig` of the ``bs`` x ``extend_lens`` grid (tokens) at each cp_size, with the CLI's
    defaults for the device: breakable (one layer per kind), graph and eager timing in two passes on a GPU,
    breakable (the rest of the layer left out) and eager in one pass with one warm-up on a CPU. ``model``: a preset name (``cpbench models``) or a ModelSpec; ``layers`` overrides its
    layer count; ``backends``: ``auto``, a name or several; ``fields``: any other SweepConfig field.

    Raises CpbenchInputError, before anything is built from them, for a parameter of the wrong type or over the
    CLI's limits (domain/limits.py: ``bs`` values <= 65536, as ``--bs``), naming the parameter; as SweepConfig
    does for ``fields``; and for an unknown preset or backend."""
    from cpbench.measure.env import resolve_device
    from cpbench.kernels.backends import resolve_auto

    cp_sizes, bs, extend_lens = (_int_list(v, name, lo, hi, example) for v, name, lo, hi, example in (
        (cp_sizes, "cp_sizes", 1, MAX_CP_SIZE, "(2, 4)"), (bs, "bs", 1, MAX_BS, "(1, 4)"),
        (extend_lens, "extend_lens", 1, MAX_TOKENS, "(2048, 8192)")))
    check_plan(len(set(cp_sizes)), list(dict.fromkeys(bs)), len(set(extend_lens)), "cp_sizes x bs x extend_lens")
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or not 0 <= prefix_len <= MAX_TOKENS:
        raise CpbenchInputError(f"prefix_len must be an integer in [0, {MAX_TOKENS}], got {prefix_len!r}")
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
        raise CpbenchInputError(f"layers must be an integer >= 1 (or None: the model's), got {layers!r}")
    if not isinstance(model, (str, ModelSpec)):
        raise CpbenchInputError(f"model must be a preset name (cpbench models lists them) or a ModelSpec, "
                                f"got {model!r}")
    if not isinstance(backends, str) and not (isinstance(backends, (list, tuple))
                                              and all(isinstance(b, str) for b in backends)):
        raise CpbenchInputError(f"backends must be a backend name or a list of them, e.g. ('torch',), got {backends!r}")
    if device is not None and not isinstance(device, str):
        if type(device).__name__ != "device":  # a torch.device reads as its text
            raise CpbenchInputError(f"device must be 'cuda', 'cuda:N', 'cpu' or None (cuda if present), got {device!r}")
        device = str(device)
    dev = resolve_device(device)
    spec = get_preset(model) if isinstance(model, str) else model
    if layers is not None:
        spec = with_overrides(spec, layers=layers)
    names = [backends] if isinstance(backends, str) else list(backends)
    names = [resolve_auto(dev) if b == "auto" else b for n in names for b in n.split(",") if b.strip()]
    defaults = dict(device_defaults(dev),
                    cells_from=(("bs_list", list(bs)), ("extend_len_list", list(extend_lens)), ("extend_lens", None),
                                ("prefix", prefix_len)))
    if "timings" in fields:  # the CPU default's rest-of-layer stand-in goes with the default timings only
        defaults.pop("layer_rest_us", None)
    batches = tuple(Batch.uniform((e,) * b, prefix_len) for b in bs for e in extend_lens)
    return SweepConfig(model=spec, cp_sizes=tuple(cp_sizes), batches=batches, backends=tuple(dict.fromkeys(names)),
                       device=dev, **{**defaults, **fields})


def _int_list(values, name: str, minimum: int, maximum: int, example: str) -> list[int]:
    """``values`` (a list or tuple) checked as the CLI checks its list options (domain/limits.check_ints), named
    ``name``. Raises CpbenchInputError for another type, naming the parameter and an example."""
    if not isinstance(values, (list, tuple)):
        raise CpbenchInputError(f"{name} must be a list or tuple of integers, e.g. {name}={example}, got {values!r}")
    return check_ints(values, name, minimum, maximum)

