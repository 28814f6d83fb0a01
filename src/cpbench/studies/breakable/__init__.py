"""The prefill forward as SGLang runs it under breakable CUDA graphs (``--timing breakable``; docs/design.md §11):
the rest of each layer (:mod:`.layer_rest`, built per cell in :mod:`.rest`) around the backend's attention
(:mod:`.layers`), timed whole or from one layer of each kind, back to back (:mod:`.stream`). What it adds to the
cell loop is :data:`.method.TIMING` (``measure.method.TimingFactory``), to a report :data:`.report.REPORT` (its
section in the summary and the ``forward`` chart); the commands hand both down (``studies.timings()``,
``studies.study_reports()``). The report side imports no torch.
"""
