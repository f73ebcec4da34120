"""Checkpoints: what the runtimes wrote, as they reported it, and checkpoint-now requests."""
