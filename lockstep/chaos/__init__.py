"""Fault injection against a running pipeline (``lockstep chaos``).

:mod:`~lockstep.chaos.scenarios` lists the scenarios as data; :mod:`~lockstep.chaos.trial`
runs one on Apache Kafka brokers of its own (:mod:`~lockstep.kafka.apache`), with the
pipeline as separate processes (:mod:`~lockstep.chaos.procs`), strikes its fault
(:mod:`~lockstep.chaos.strike`) and reads the ledger back from the topics
(:mod:`~lockstep.chaos.readback`) into an :class:`~lockstep.chaos.outcome.Outcome`.
:mod:`~lockstep.chaos.hostile` makes the hostile records.
"""
