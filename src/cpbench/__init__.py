"""cpbench: benchmark and profile zigzag context-parallel prefill attention (fused vs two-call)."""

__version__ = "0.1.0"
