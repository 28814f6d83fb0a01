"""One rank of one cell -> rows: timing, memory, phases, kernel counts, clocks, affinity."""
