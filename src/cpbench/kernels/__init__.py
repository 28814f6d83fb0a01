"""Tensors and attention paths: the backends, the paged KV cache, a cell's inputs, the check."""
