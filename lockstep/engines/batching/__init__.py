"""Batching for the ``queue`` stage: policies, the deadline scheduler, the dispatcher."""
