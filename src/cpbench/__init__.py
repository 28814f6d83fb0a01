"""cpbench: benchmark and profile zigzag context-parallel prefill attention (fused vs two-call).

The Python API (``cpbench.api``; imported on first use, so ``import cpbench`` stays light):
``cpbench.grid(...)`` or ``cpbench.SweepConfig(...)`` builds a checked configuration, ``cpbench.sweep(config,
out)`` runs it and returns a ``cpbench.Run`` (rows as a DataFrame, manifest, report path); ``cpbench.Run.open``
reads a run directory; bad input raises ``cpbench.CpbenchInputError`` with a one-line message.
"""

__version__ = "0.1.0"

_API = {"sweep": "cpbench.api", "grid": "cpbench.api", "Run": "cpbench.api", "SweepHooks": "cpbench.api",
        "SweepConfig": "cpbench.commands.config", "Batch": "cpbench.domain.cells", "get_preset": "cpbench.domain.models",
        "Mode": "cpbench.domain.modes", "Timing": "cpbench.domain.modes", "DType": "cpbench.domain.modes",
        "CpbenchInputError": "cpbench.errors"}
__all__ = sorted(_API)


def __dir__() -> list[str]:
    """``dir(cpbench)``: the API this module serves on first use, beside its own names."""
    return sorted({*globals(), *_API})


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'cpbench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_API[name]), name)
