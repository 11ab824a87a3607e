"""Benchmarks that print ratios against a baseline or a limit (``lockstep bench``)."""
