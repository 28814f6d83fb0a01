"""Where ranks run: the local group, torchrun's process groups, the K|V all-gather, the launcher."""
