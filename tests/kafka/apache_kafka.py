"""The test session's Apache Kafka broker: :mod:`lockstep.kafka.apache`.

``lockstep chaos`` runs the same launcher (a single node or a three-node cluster, jars
from ``tests/kafka/pom.xml``).
"""

from lockstep.errors import KafkaBrokerError
from lockstep.kafka.apache import (
    DEFAULT_JVM_OPTS,
    DEFAULT_POM,
    ApacheKafka,
    KafkaCluster,
    resolve_classpath,
)

__all__ = [
    "DEFAULT_JVM_OPTS",
    "DEFAULT_POM",
    "ApacheKafka",
    "KafkaBrokerError",
    "KafkaCluster",
    "resolve_classpath",
]
