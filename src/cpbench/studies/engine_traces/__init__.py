"""``cpbench profile --from TRACE...``: an engine's own traces (torch.profiler Chrome JSON or Nsight Systems
reports, one per rank) read without a GPU: the forwards found in them, attention kernels per step, a verdict
(fused, two-call, or no evidence of CP) and the per-layer comparison with a cpbench cell (docs/design.md §13).

Modules: :mod:`.traces` (``read_traces``: one ``RankTrace`` per rank, via :mod:`.torch_trace` and :mod:`.nsys_trace`,
records in :mod:`.rank_trace`), :mod:`.forwards` (forwards and per-layer times), :mod:`.range_check`, :mod:`.verdict`,
:mod:`.compare` (against a cpbench cell).
"""
