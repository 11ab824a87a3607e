"""Lockstep: real-time multimodal inference over Kafka.

Everything lives under this one namespace, in layers that import only those before them
(docs/architecture.md): :mod:`lockstep.errors` and :mod:`lockstep.config`; the wire
contracts (:mod:`lockstep.topics`); the pure stage operators (:mod:`lockstep.streams`);
:mod:`lockstep.telemetry`; :mod:`lockstep.engines`; the Kafka layer (:mod:`lockstep.kafka`);
the roles (:mod:`lockstep.agents`), producers (:mod:`lockstep.producer`) and media
(:mod:`lockstep.media`); :mod:`lockstep.observe`; :mod:`lockstep.bench` and
:mod:`lockstep.chaos`; the command line (:mod:`lockstep.cli`). :mod:`lockstep.api` is the
public Python surface.
"""

__version__ = "0.1.0"
