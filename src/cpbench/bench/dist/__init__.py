"""Multi-process context parallelism: process groups (``groups``) and the per-layer KV all-gather
into the paged pool (``kv_gather``), as SGLang's prefill CP runs it. Launch with torchrun."""
