"""Inference engines and the batching worker."""
