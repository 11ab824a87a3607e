"""A broker that tests may take down and bring back on the same log dir and port.

:class:`~lockstep.kafka.apache.ApacheKafka` has it all: ``terminate`` (SIGTERM) and ``kill``
(SIGKILL) keep the data, ``outage`` takes the broker down, waits and starts it again. Use
one per test (function scope): never take the shared session broker down.
"""

from lockstep.kafka.apache import ApacheKafka as RestartableKafka
from lockstep.kafka.apache import Outage

__all__ = ["Outage", "RestartableKafka"]
