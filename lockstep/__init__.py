"""Lockstep: real-time multimodal inference over Kafka.

Everything lives under this one namespace, following the stages of the pipeline:
``lockstep.topics`` (catalog, schemas, wire codec), ``lockstep.streams`` (settings, app
factory and the pure stream operators), ``lockstep.agents`` (thin Faust agents),
``lockstep.engines`` (inference engines and the batching worker). The top of the package
holds what spans them: the error tree and the command line.
"""

__version__ = "0.1.0"
