"""A broker node's directory: ``server.properties``, log4j2 config, storage format.

Every node is one JVM acting as both KRaft controller and broker. A single node is its
own quorum; the nodes of a cluster share a cluster id and list each other as voters.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lockstep.errors import KafkaBrokerError
from lockstep.kafka.apache.logtail import tail

__all__ = [
    "DEFAULT_JVM_OPTS",
    "NodeAddress",
    "PropertyValue",
    "format_storage",
    "java_command",
    "new_cluster_id",
    "server_properties",
    "write_config_files",
]

DEFAULT_JVM_OPTS: Final[tuple[str, ...]] = (
    # A small initial heap saves ~50 MiB RSS versus -Xms256m at no measurable start-up
    # cost; the heap grows on demand up to -Xmx.
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    # C1 only: noticeably faster start-up and a smaller footprint; peak throughput does
    # not matter here.
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
"""JVM options for a broker: small heap, fast start-up."""

_TOOL_JVM_OPTS: Final[tuple[str, ...]] = (
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
)
"""JVM options for the short-lived storage format tool."""

_LOG4J2_CONFIG: Final[str] = """\
status = warn
name = lockstep-kafka
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""

PropertyValue = str | int | float | bool
"""A value accepted in ``server.properties`` overrides."""


@dataclass(frozen=True)
class NodeAddress:
    """Where one node listens: its id, client port and controller port (on 127.0.0.1)."""

    node_id: int
    port: int
    controller_port: int


def _format_value(value: PropertyValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def new_cluster_id() -> str:
    """A fresh KRaft cluster id (a URL-safe base64 UUID, as Kafka makes them)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # Kafka's Uuid.randomUuid() never yields an id starting with "-".
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(data_dir: Path, node: NodeAddress, voters: Sequence[NodeAddress],
                      overrides: Mapping[str, PropertyValue]) -> dict[str, str]:
    """Return a node's ``server.properties``, ``overrides`` applied last.

    Internal topics are replicated to every voter (at most 3), with ``min.insync.replicas``
    one less (at least 1), so a cluster of three keeps taking writes with one node down.
    """
    replicas = min(3, len(voters))
    insync = max(1, replicas - 1)
    properties: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(
            f"{v.node_id}@127.0.0.1:{v.controller_port}" for v in voters),
        "listeners": (f"PLAINTEXT://127.0.0.1:{node.port},"
                      f"CONTROLLER://127.0.0.1:{node.controller_port}"),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "metadata.log.dir": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(insync),
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(insync),
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(insync),
        "group.initial.rebalance.delay.ms": "0",
        "message.max.bytes": str(8 * 1024 * 1024),
        "replica.fetch.max.bytes": str(8 * 1024 * 1024),
        # After a hard kill the restarted node cannot re-register until the old session
        # expires (default 9 s), and a cluster moves a dead node's leaderships only then.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
        # A node back from a kill rejoins the ISR quickly; a short replica lag bound
        # makes a dead follower leave it quickly (min.insync is counted on the live ones).
        "replica.lag.time.max.ms": "5000",
    }
    properties.update({key: _format_value(val) for key, val in overrides.items()})
    return properties


def write_config_files(directory: Path, properties: Mapping[str, str], log_level: str) -> None:
    """Write ``server.properties`` and ``log4j2.properties`` into ``directory``."""
    (directory / "server.properties").write_text(
        "".join(f"{key}={val}\n" for key, val in properties.items()), encoding="utf-8")
    (directory / "log4j2.properties").write_text(
        _LOG4J2_CONFIG.format(level=log_level), encoding="utf-8")


def java_command(java: str, classpath: str, directory: Path, opts: Sequence[str]) -> list[str]:
    """Return the JVM command line, up to the main class, for a node directory."""
    return [
        java,
        *opts,
        f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={directory}",
        "-cp",
        classpath,
    ]


def format_storage(java: str, classpath: str, directory: Path, cluster_id: str) -> None:
    """Format a node's KRaft storage for ``cluster_id``.

    Raises:
        KafkaBrokerError: If the storage tool fails or runs over 120 s.
    """
    command = [
        *java_command(java, classpath, directory, _TOOL_JVM_OPTS),
        "kafka.tools.StorageTool",
        "format",
        "--config",
        str(directory / "server.properties"),
        "--cluster-id",
        cluster_id,
    ]
    try:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired as exc:
        msg = "Kafka storage format timed out after 120s"
        raise KafkaBrokerError(msg) from exc
    if result.returncode != 0:
        msg = f"Kafka storage format failed (exit {result.returncode}):\n" + tail(
            result.stdout + result.stderr)
        raise KafkaBrokerError(msg)
