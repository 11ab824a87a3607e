"""A three-node Apache Kafka cluster in KRaft mode, each node controller and broker.

Internal topics are replicated three times with ``min.insync.replicas`` 2, so the cluster
keeps taking ``acks=all`` writes, and keeps its controller quorum, with one node down.
Each node has a small heap (the three fit in about 1.5 GB) and its own log dir, on which
it is started again after a SIGTERM or SIGKILL::

    with KafkaCluster() as cluster:
        cluster.nodes[1].kill()
        cluster.nodes[1].start()
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from lockstep.kafka.apache.classpath import DEFAULT_POM, LauncherEnv
from lockstep.kafka.apache.config import (
    DEFAULT_JVM_OPTS,
    NodeAddress,
    PropertyValue,
    new_cluster_id,
)
from lockstep.kafka.apache.node import KafkaNode, NodeOptions, Runtime, free_port

__all__ = ["CLUSTER_JVM_OPTS", "KafkaCluster"]

#: How long the nodes of a cluster being discarded may take to shut down.
_SHUTDOWN_S = 5.0

CLUSTER_JVM_OPTS: tuple[str, ...] = tuple(
    "-Xmx384m" if opt.startswith("-Xmx") else opt for opt in DEFAULT_JVM_OPTS)
"""Each node's JVM options: the single broker's, with a smaller heap ceiling."""

log = logging.getLogger(__name__)


def _addresses(size: int) -> list[NodeAddress]:
    ports: list[int] = []
    while len(ports) < 2 * size:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return [NodeAddress(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(size)]


class KafkaCluster:
    """``size`` Apache Kafka nodes forming one KRaft cluster on 127.0.0.1."""

    def __init__(self, size: int = 3, *, pom: Path = DEFAULT_POM, classpath: str | None = None,
                 java: str | None = None, mvn: str | None = None,
                 jvm_opts: Sequence[str] = CLUSTER_JVM_OPTS,
                 broker_properties: Mapping[str, PropertyValue] | None = None,
                 log_level: str = "INFO", base_dir: Path | None = None,
                 keep_dir: bool | None = None, startup_timeout: float = 90.0,
                 stop_timeout: float = 30.0) -> None:
        """Configure the cluster; nothing starts until :meth:`start`.

        Args:
            size: Nodes (3 for replication 3 and a quorum that survives one loss).
            pom: The pom pinning the Kafka version.
            classpath: Ready-made broker jars (default ``LOCKSTEP_KAFKA_CLASSPATH``).
            java: Java executable.
            mvn: Maven executable.
            jvm_opts: Options for each node's JVM.
            broker_properties: Extra or overriding ``server.properties`` of every node.
            log_level: Root log4j2 level of the node logs.
            base_dir: Parent of the node directories.
            keep_dir: Keep the directories after :meth:`stop`.
            startup_timeout: Seconds to wait for each node to become ready.
            stop_timeout: Seconds to wait after SIGTERM before SIGKILL.
        """
        env = LauncherEnv.read()
        self._options = NodeOptions(
            pom=pom, classpath=classpath or env.classpath, java=java, mvn=mvn,
            jvm_opts=tuple(jvm_opts), broker_properties=dict(broker_properties or {}),
            log_level=log_level, base_dir=base_dir,
            keep_dir=env.keep_dir if keep_dir is None else keep_dir,
            startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.nodes: list[KafkaNode] = [KafkaNode(a, self._options) for a in _addresses(size)]

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, comma-separated."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def voters(self) -> list[NodeAddress]:
        """The controller quorum."""
        return [node.address for node in self.nodes]

    def start(self) -> None:
        """Format every node for one cluster id, launch them all, wait until each is ready.

        The nodes start together: none is ready before a quorum of controllers runs.

        Raises:
            KafkaBrokerError: A node fails to format, launch or become ready; every node
                is then stopped and its directory removed.
        """
        runtime = Runtime.resolve(self._options)
        cluster_id = new_cluster_id()
        try:
            for node in self.nodes:
                node.prepare(runtime, self.voters, cluster_id)
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node and discard the data.

        All nodes get SIGTERM at once, and SIGKILL after a short wait: the last node up
        would wait in vain for a quorum to shut down in order. A node that exited on its
        own before has the end of its log logged first, before its directory goes.
        """
        for node in self.nodes:
            status = node.exit_status
            if status is not None:
                log.warning("Kafka node %d had exited on its own (status %d):\n%s",
                            node.address.node_id, status, node.log_tail())
        for node in self.nodes:
            with contextlib.suppress(OSError):
                node.signal_stop()
        for node in self.nodes:
            with contextlib.suppress(OSError):
                node.discard(_SHUTDOWN_S)

    def __enter__(self) -> Self:
        """Start the cluster and return it, every node ready."""
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the cluster."""
        self.stop()
