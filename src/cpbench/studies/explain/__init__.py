"""``cpbench explain``: one cell and rank under Nsight Compute, fused against two-call, per attention kernel
(duration, grid, waves, occupancy, SM and DRAM throughput), the work split of prev, next and fused, and a verdict
naming the measured cause (docs/design.md §9). :mod:`.measure` runs the child under ncu and reads its report;
:mod:`.report` turns it into ``explain.json`` and markdown; :mod:`.chart` draws it."""
