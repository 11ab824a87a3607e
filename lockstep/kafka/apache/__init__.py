"""Apache Kafka from its jars: a single KRaft node, or a three-node cluster (``lockstep chaos``).

:class:`ApacheKafka` and :class:`KafkaCluster` start JVMs from jars resolved by Maven
(the repository's ``tests/kafka/pom.xml``) or a given classpath, each node in a temporary
directory it is restarted on after a SIGTERM or SIGKILL. The test suite's brokers are these.
"""

from lockstep.kafka.apache.classpath import CLASSPATH_HINT, DEFAULT_POM, resolve_classpath
from lockstep.kafka.apache.cluster import KafkaCluster
from lockstep.kafka.apache.config import DEFAULT_JVM_OPTS
from lockstep.kafka.apache.node import KafkaNode
from lockstep.kafka.apache.single import ApacheKafka, Outage

__all__ = [
    "CLASSPATH_HINT",
    "DEFAULT_JVM_OPTS",
    "DEFAULT_POM",
    "ApacheKafka",
    "KafkaCluster",
    "KafkaNode",
    "Outage",
    "resolve_classpath",
]
