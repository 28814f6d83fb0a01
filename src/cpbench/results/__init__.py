"""The on-disk format and what derives from it (no torch): schema, run directory, critical path, uncertainty, verdicts, compare."""
