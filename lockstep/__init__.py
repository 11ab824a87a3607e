"""Lockstep: real-time multimodal inference over Kafka.

The packages of the distribution follow the stages of the pipeline:
``topics`` (catalog, schemas, wire codec), ``streams`` (settings, app factory and the pure
stream operators), ``agents`` (thin Faust agents), ``engines`` (inference engines and the
batching worker). This package holds what spans them: the error tree and the CLI.
"""

__version__ = "0.1.0"
