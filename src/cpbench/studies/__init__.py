"""Optional studies, each in one folder: what cpbench does beside its core sweep (measure, report), declared in
the study's own modules. The core (``run``, ``report``, ``measure`` and everything below) never imports a study,
and studies do not import each other (import-linter contracts in pyproject.toml); the commands (``cli``, ``api``)
call them.

* ``breakable``: the prefill forward as SGLang runs it under breakable CUDA graphs (``--timing breakable``, the
  main job's first answer): the rest of each layer around the backend's attention, timed whole or one layer of each
  kind (docs/design.md §11).
* ``engine_traces``: ``cpbench profile --from``, reading profiles an engine wrote itself (torch.profiler or nsys)
  into kernel counts per step, a fused/two-call verdict and a comparison with a cpbench cell (docs/design.md §13).
* ``line``: two-call, fused and cp-native on one kernel family, its report section and chart.
* ``explain``: ``cpbench explain``, one cell and rank under Nsight Compute and a verdict naming the cause.
"""


def study_reports() -> tuple:
    """The studies' parts of a run's report (``report.study.StudyReport``), in report order: the one list the report
    iterates, handed down by the commands (adding a study's report is one entry here; no registration at import)."""
    from cpbench.studies import line
    from cpbench.studies.breakable.report import REPORT as BREAKABLE

    return (BREAKABLE, line.REPORT)


def timings() -> tuple:
    """The studies' timings beside eager and graph (``measure.method.TimingFactory``): the one list the cell loop is
    handed by the commands (``Runner(timings=...)``)."""
    from cpbench.studies.breakable.method import TIMING

    return (TIMING,)
