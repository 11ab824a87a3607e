"""A single-node Apache Kafka broker (KRaft, combined controller) that can be taken down.

Typical use::

    with ApacheKafka() as kafka:
        ...  # kafka.bootstrap
        kafka.take_down(hard=True)  # SIGKILL; the data stays
        kafka.start()               # the same log dir, the same port

Needs ``java`` (17+) and either ``mvn`` with the repository's pom or a ready classpath
(:mod:`lockstep.kafka.apache.classpath`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from lockstep.errors import KafkaBrokerError
from lockstep.kafka.apache.classpath import DEFAULT_POM, LauncherEnv
from lockstep.kafka.apache.config import (
    DEFAULT_JVM_OPTS,
    NodeAddress,
    PropertyValue,
    new_cluster_id,
)
from lockstep.kafka.apache.node import KafkaNode, NodeOptions, Runtime, free_port

__all__ = ["ApacheKafka", "Outage"]

NODE_ID = 1


@dataclass(frozen=True)
class Outage:
    """When the broker went down and came back (monotonic seconds)."""

    down_at: float
    up_at: float | None

    @property
    def seconds(self) -> float | None:
        """How long the broker was unreachable, if it came back."""
        return None if self.up_at is None else self.up_at - self.down_at


class ApacheKafka:
    """A single-node Apache Kafka broker.

    Ports are picked on the first :meth:`start` and kept for the object's lifetime, so
    clients reconnect to the same :attr:`bootstrap` after :meth:`restart`. :meth:`stop`
    discards the data; :meth:`kill`, :meth:`terminate` and :meth:`restart` keep it.
    """

    def __init__(
        self,
        *,
        pom: Path = DEFAULT_POM,
        classpath: str | None = None,
        java: str | None = None,
        mvn: str | None = None,
        jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
        broker_properties: Mapping[str, PropertyValue] | None = None,
        log_level: str = "INFO",
        base_dir: Path | None = None,
        keep_dir: bool | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        """Configure a broker; nothing starts until :meth:`start`.

        Args:
            pom: The pom pinning the Kafka version.
            classpath: Ready-made broker jars (default ``LOCKSTEP_KAFKA_CLASSPATH``, else
                Maven on ``pom``).
            java: Java executable; defaults to ``$JAVA_HOME/bin/java`` or ``java``.
            mvn: Maven executable; defaults to ``mvn`` on PATH.
            jvm_opts: Options for the broker JVM.
            broker_properties: Extra or overriding ``server.properties`` entries.
            log_level: Root log4j2 level of the broker log.
            base_dir: Parent of the broker's temporary directory.
            keep_dir: Keep the directory after :meth:`stop` (default
                ``LOCKSTEP_KAFKA_KEEP_DIR``).
            startup_timeout: Seconds to wait for the broker to become ready.
            stop_timeout: Seconds to wait after SIGTERM before SIGKILL.
        """
        env = LauncherEnv.read()
        self._options = NodeOptions(
            pom=pom, classpath=classpath or env.classpath, java=java, mvn=mvn,
            jvm_opts=tuple(jvm_opts), broker_properties=dict(broker_properties or {}),
            log_level=log_level, base_dir=base_dir,
            keep_dir=env.keep_dir if keep_dir is None else keep_dir,
            startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self._node: KafkaNode | None = None

    # ------------------------------------------------------------------ info

    @property
    def node(self) -> KafkaNode:
        """The broker's node.

        Raises:
            KafkaBrokerError: Before the first :meth:`start`.
        """
        if self._node is None:
            raise KafkaBrokerError("Kafka broker not started: no port assigned yet")
        return self._node

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` bootstrap address of the broker."""
        return self.node.bootstrap

    @property
    def port(self) -> int:
        """The broker (client) listener port."""
        return self.node.address.port

    @property
    def controller_port(self) -> int:
        """The KRaft controller listener port."""
        return self.node.address.controller_port

    @property
    def properties(self) -> dict[str, str]:
        """The effective ``server.properties`` (empty before the first start)."""
        return {} if self._node is None else self._node.properties

    @property
    def directory(self) -> Path | None:
        """The broker's temporary directory, or None when there is none."""
        return None if self._node is None else self._node.directory

    @property
    def log_file(self) -> Path | None:
        """The broker's combined stdout/stderr/log4j log file, if any."""
        return None if self._node is None else self._node.log_file

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs, else None."""
        return None if self._node is None else self._node.pid

    @property
    def is_running(self) -> bool:
        """Whether the broker JVM is alive (not necessarily ready)."""
        return self._node is not None and self._node.is_running

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the broker log, or "" if there is none."""
        return "" if self._node is None else self._node.log_tail(lines)

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the broker and wait until it is ready.

        The first call (or the first after :meth:`stop`) creates and formats a fresh
        directory; after :meth:`kill` or :meth:`terminate` the data is reused.

        Raises:
            KafkaBrokerError: Java or the jars are missing, formatting fails, the broker
                exits or is not ready within ``startup_timeout``. A directory created by
                this call is then removed (unless kept); the message ends with the log.
        """
        if self.is_running:
            return
        runtime = Runtime.resolve(self._options)
        if self._node is None:
            port = free_port()
            controller = free_port()
            while controller == port:
                controller = free_port()
            self._node = KafkaNode(NodeAddress(NODE_ID, port, controller), self._options)
        node = self._node
        fresh = False
        try:
            fresh = node.prepare(runtime, [node.address], new_cluster_id())
            node.start()
        except BaseException:
            if fresh:
                node.discard()
            raise

    def stop(self) -> None:
        """Stop the broker gracefully and discard its data; safe to call repeatedly."""
        if self._node is not None:
            self._node.discard()

    def kill(self) -> None:
        """SIGKILL the broker, keeping its data for a later :meth:`start`."""
        if self._node is not None:
            self._node.kill()

    def terminate(self) -> None:
        """SIGTERM the broker and wait for it to exit, keeping its data."""
        if self._node is not None:
            self._node.terminate()

    def take_down(self, *, hard: bool) -> None:
        """SIGKILL (``hard``) or SIGTERM the broker; its data stays."""
        if self._node is not None:
            self._node.take_down(hard=hard)

    def restart(self, *, hard: bool = False) -> None:
        """Restart on the same port with the same data (``hard``: SIGKILL first).

        Raises:
            KafkaBrokerError: The broker fails to come back.
        """
        self.take_down(hard=hard)
        self.start()

    async def outage(self, after_s: float, down_s: float | None, *, hard: bool) -> Outage:
        """After ``after_s``, take the broker down; start it again ``down_s`` later.

        ``down_s`` None leaves it down. Stopping and starting block a thread, not the loop.
        """
        await asyncio.sleep(after_s)
        await asyncio.to_thread(self.take_down, hard=hard)
        down_at = time.monotonic()
        if down_s is None:
            return Outage(down_at, None)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.start)
        return Outage(down_at, time.monotonic())

    def __enter__(self) -> Self:
        """Start the broker and return it, running and ready."""
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the broker and discard its data."""
        self.stop()

    def __repr__(self) -> str:
        """Describe the broker's address and state."""
        state = "running" if self.is_running else "stopped"
        where = self._node.bootstrap if self._node is not None else "unassigned"
        return f"<ApacheKafka {where} {state}>"
