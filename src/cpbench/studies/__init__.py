"""Optional studies, each in one folder: what cpbench does beside its core sweep (measure, report), declared in
the study's own modules. The core (``run``, ``report``, ``measure`` and everything below) never imports a study,
and studies do not import each other (import-linter contracts in pyproject.toml); the commands (``cli``, ``api``)
call them.

* ``engine_traces``: ``cpbench profile --from``, reading profiles an engine wrote itself (torch.profiler or nsys)
  into kernel counts per step, a fused/two-call verdict and a comparison with a cpbench cell (docs/design.md §13).
"""
