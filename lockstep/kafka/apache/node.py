"""One Apache Kafka node: a JVM that is both KRaft controller and broker, and its directory.

A node keeps its ports and its directory (config, data, log) from its first start until
:meth:`KafkaNode.discard`, so it can be SIGTERMed or SIGKILLed and started again on the
same log dir, at the same address. :class:`~lockstep.kafka.apache.single.ApacheKafka`
runs one node alone; :class:`~lockstep.kafka.apache.cluster.KafkaCluster` runs three.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from lockstep.errors import KafkaBrokerError
from lockstep.kafka.apache.classpath import DEFAULT_POM, find_java, resolve_classpath
from lockstep.kafka.apache.config import (
    DEFAULT_JVM_OPTS,
    NodeAddress,
    PropertyValue,
    format_storage,
    java_command,
    server_properties,
    write_config_files,
)
from lockstep.kafka.apache.logtail import LOG_TAIL_LINES, tail
from lockstep.kafka.apache.readiness import wait_ready

__all__ = ["KafkaNode", "NodeOptions", "Runtime", "free_port", "with_parent"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeOptions:
    """How nodes are launched.

    Attributes:
        pom: The pom pinning the Kafka version (see :func:`resolve_classpath`).
        classpath: Ready-made broker jars; Maven is not run when given.
        java: Java executable; defaults to ``$JAVA_HOME/bin/java`` or ``java`` on PATH.
        mvn: Maven executable; defaults to ``mvn`` on PATH.
        jvm_opts: Options for each broker JVM.
        broker_properties: Extra or overriding ``server.properties`` entries.
        log_level: Root log4j2 level of the broker log.
        base_dir: Parent of the nodes' temporary directories (default: the system's).
        keep_dir: Keep directories after :meth:`KafkaNode.discard` (post-mortems).
        startup_timeout: Seconds to wait for a node to serve clients.
        stop_timeout: Seconds to wait after SIGTERM before SIGKILL.
    """

    pom: Path = DEFAULT_POM
    classpath: str | None = None
    java: str | None = None
    mvn: str | None = None
    jvm_opts: tuple[str, ...] = DEFAULT_JVM_OPTS
    broker_properties: Mapping[str, PropertyValue] = field(default_factory=dict)
    log_level: str = "INFO"
    base_dir: Path | None = None
    keep_dir: bool = False
    startup_timeout: float = 60.0
    stop_timeout: float = 30.0


@dataclass(frozen=True)
class Runtime:
    """The java executable and the broker classpath, resolved once per broker or cluster."""

    java: str
    classpath: str

    @classmethod
    def resolve(cls, options: NodeOptions) -> Runtime:
        """Find java and the jars (Maven, or the given classpath).

        Raises:
            KafkaBrokerError: Java or the jars cannot be found.
        """
        return cls(find_java(options.java),
                   resolve_classpath(options.pom, classpath=options.classpath, mvn=options.mvn))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def with_parent(command: list[str]) -> list[str]:
    """``command`` made to die with the thread that starts it, where Linux's setpriv exists.

    A launcher killed outright (SIGKILL, an abort in a native library) leaves no broker
    or role process behind. The signal comes when the *thread* that started the child
    ends: start children from the main thread or a pool thread that outlives them.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else command


def _terminate(process: subprocess.Popen[bytes], directory: Path | None) -> None:
    """Last-resort cleanup for a node never stopped (garbage or interpreter exit)."""
    if process.poll() is None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


class KafkaNode:
    """One broker JVM (combined KRaft controller) with a directory that outlives it.

    Attributes:
        address: Node id and ports.
        properties: The effective ``server.properties``, once prepared.
    """

    def __init__(self, address: NodeAddress, options: NodeOptions) -> None:
        self.address = address
        self._options = options
        self._dir: Path | None = None
        self._runtime: Runtime | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._finalizer: weakref.finalize[
            [subprocess.Popen[bytes], Path | None], KafkaNode] | None = None
        self.properties: dict[str, str] = {}

    # ------------------------------------------------------------------ info

    @property
    def bootstrap(self) -> str:
        """The node's ``host:port``."""
        return f"127.0.0.1:{self.address.port}"

    @property
    def directory(self) -> Path | None:
        """The node's directory, or None before the first start and after discard."""
        return self._dir

    @property
    def log_file(self) -> Path | None:
        """The node's combined stdout/stderr/log4j log file, if any."""
        return None if self._dir is None else self._dir / "broker.log"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def exit_status(self) -> int | None:
        """The JVM's exit status if it exited without being stopped or killed, else None."""
        process = self._process
        return None if process is None else process.poll()

    @property
    def is_running(self) -> bool:
        """Whether the JVM is alive (not necessarily ready)."""
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the node's log, or "" if there is none."""
        log_file = self.log_file
        if log_file is None:
            return ""
        try:
            return tail(log_file.read_text(encoding="utf-8", errors="replace"), lines)
        except OSError:
            return ""

    # ------------------------------------------------------------- lifecycle

    def prepare(self, runtime: Runtime, voters: Sequence[NodeAddress], cluster_id: str) -> bool:
        """Create and format the node's directory unless it has one; True if created.

        Raises:
            KafkaBrokerError: The storage format failed.
        """
        self._runtime = runtime
        if self._dir is not None:
            return False
        directory = Path(tempfile.mkdtemp(prefix=f"lockstep-kafka-{self.address.node_id}-",
                                          dir=self._options.base_dir))
        self._dir = directory
        data_dir = directory / "data"
        data_dir.mkdir()
        self.properties = server_properties(data_dir, self.address, voters,
                                            self._options.broker_properties)
        write_config_files(directory, self.properties, self._options.log_level)
        format_storage(runtime.java, runtime.classpath, directory, cluster_id)
        return True

    def launch(self) -> None:
        """Start the JVM on the prepared directory (does nothing while it runs).

        Raises:
            KafkaBrokerError: Not prepared, or the JVM cannot be launched.
        """
        if self.is_running:
            return
        if self._dir is None or self._runtime is None:
            raise KafkaBrokerError(f"Kafka node {self.address.node_id} launched unprepared")
        directory, runtime = self._dir, self._runtime
        command = [*java_command(runtime.java, runtime.classpath, directory,
                                 self._options.jvm_opts),
                   "kafka.Kafka", str(directory / "server.properties")]
        log_handle = (directory / "broker.log").open("ab")
        try:
            process = subprocess.Popen(
                with_parent(command), stdin=subprocess.DEVNULL, stdout=log_handle,
                stderr=subprocess.STDOUT, cwd=directory,
                # Terminal signals (Ctrl-C) go to the launcher, which stops the node.
                start_new_session=True)
        except OSError as exc:
            log_handle.close()
            raise KafkaBrokerError(f"cannot launch the Kafka broker JVM: {exc}") from exc
        self._process = process
        self._log_handle = log_handle
        self._finalizer = weakref.finalize(
            self, _terminate, process, None if self._options.keep_dir else directory)
        log.info("started Kafka node %d, pid %d, on %s", self.address.node_id, process.pid,
                 self.bootstrap)

    def wait_ready(self) -> None:
        """Block until the node serves metadata and group coordination.

        Raises:
            KafkaBrokerError: The JVM exited or is not ready within ``startup_timeout``.
        """
        process = self._process
        if process is None:
            raise KafkaBrokerError("Kafka broker process vanished before it became ready")
        wait_ready(process, self.address.port, self.address.node_id,
                   self._options.startup_timeout, self._log_excerpt)

    def start(self) -> None:
        """Launch the prepared node again (same directory) and wait until it is ready.

        Raises:
            KafkaBrokerError: The node does not come back; the JVM is then killed.
        """
        try:
            self.launch()
            self.wait_ready()
        except BaseException:
            self.kill()
            raise

    def terminate(self, timeout_s: float | None = None) -> None:
        """SIGTERM the JVM and wait for it; data is kept.

        Args:
            timeout_s: SIGKILL after this long (default ``stop_timeout``).
        """
        process = self._process
        timeout_s = self._options.stop_timeout if timeout_s is None else timeout_s
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("Kafka node pid %d ignored SIGTERM for %.0fs; killing it",
                            process.pid, timeout_s)
        self.kill()

    def signal_stop(self) -> None:
        """Send SIGTERM without waiting (a cluster's nodes shut down together)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the JVM; data is kept for a later :meth:`start`."""
        process = self._process
        if process is not None:
            if process.poll() is None:
                process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
            self._process = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def take_down(self, *, hard: bool) -> None:
        """SIGKILL (``hard``) or SIGTERM the node; its data stays."""
        if hard:
            self.kill()
        else:
            self.terminate()

    def discard(self, timeout_s: float | None = None) -> None:
        """Stop the node (SIGTERM, then SIGKILL) and remove its directory unless kept.

        Args:
            timeout_s: SIGKILL after this long (default ``stop_timeout``).
        """
        self.terminate(timeout_s)
        if self._dir is not None:
            if self._options.keep_dir:
                log.info("keeping Kafka node directory %s", self._dir)
            else:
                shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _log_excerpt(self) -> str:
        where = str(self.log_file)
        if not self._options.keep_dir:
            where += " (removed on stop; keep it with LOCKSTEP_KAFKA_KEEP_DIR=1)"
        return f"broker log {where} ends with:\n{self.log_tail()}"
