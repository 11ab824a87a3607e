"""Fault injection against a running pipeline (``lockstep chaos``).

Kills, broker restarts, hostile records and stream floods, and the ledger read back after.
"""
