"""Optional studies, each in one folder: what cpbench does beside its core sweep (measure, report), declared in
the study's own modules. The core (``run``, ``report``, ``measure`` and everything below) never imports a study,
and studies do not import each other (import-linter contracts in pyproject.toml); the commands (``cli``, ``api``)
call them.

* ``engine_traces``: ``cpbench profile --from``, reading profiles an engine wrote itself (torch.profiler or nsys)
  into kernel counts per step, a fused/two-call verdict and a comparison with a cpbench cell (docs/design.md §13).
* ``line``: two-call, fused and cp-native on one kernel family, its report section and chart.
* ``explain``: ``cpbench explain``, one cell and rank under Nsight Compute and a verdict naming the cause.
"""


def study_reports() -> tuple:
    """The studies' parts of a run's report (``report.study.StudyReport``), in report order: the one list the report
    iterates, handed down by the commands (adding a study's report is one entry here; no registration at import)."""
    from cpbench.studies import line

    return (line.REPORT,)
