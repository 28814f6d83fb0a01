"""What is measured, as pure integers (no torch): geometry, models, lengths, FLOPs, the work split."""
