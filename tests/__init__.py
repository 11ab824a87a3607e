"""Lockstep test suite."""
