"""Charts and markdown from a run directory (no torch)."""
