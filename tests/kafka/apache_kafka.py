"""Start a real single-node Apache Kafka broker (KRaft mode) for tests.

Each :class:`ApacheKafka` runs one JVM that is both the KRaft controller and
the broker, listening on two free loopback ports, with all of its state
(config, data, log) in a fresh temporary directory. Collaborators:
:mod:`tests.kafka.classpath` finds java and the jars,
:mod:`tests.kafka.broker_setup` prepares the directory, and
:mod:`tests.kafka.readiness` waits for the broker to serve clients.

Typical use in a pytest fixture::

    with ApacheKafka() as kafka:
        yield kafka.bootstrap

Requirements: ``java`` (17+) on ``PATH`` or under ``$JAVA_HOME``, and ``mvn``
on ``PATH`` unless ``LOCKSTEP_KAFKA_CLASSPATH`` already names the jars.

Environment variables (see :mod:`tests.kafka.classpath` for the classpath ones):
    LOCKSTEP_KAFKA_KEEP_DIR: If set to a non-empty value other than ``0``,
        broker directories are kept after :meth:`ApacheKafka.stop` for
        post-mortem inspection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Self

from tests.kafka.broker_setup import (
    DEFAULT_JVM_OPTS,
    PropertyValue,
    format_storage,
    java_command,
    server_properties,
    write_config_files,
)
from tests.kafka.classpath import DEFAULT_POM, find_java, resolve_classpath
from tests.kafka.errors import LOG_TAIL_LINES, KafkaBrokerError, tail
from tests.kafka.readiness import wait_ready

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType

__all__ = [
    "DEFAULT_JVM_OPTS",
    "DEFAULT_POM",
    "ApacheKafka",
    "KafkaBrokerError",
    "resolve_classpath",
]

_log = logging.getLogger(__name__)


def _env_flag(name: str) -> bool:
    value = os.environ.get(name, "")
    return value not in ("", "0")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _terminate(process: subprocess.Popen[bytes], directory: Path | None) -> None:
    """Last-resort cleanup for a broker never stopped (garbage or exit).

    ``directory`` is None when it is to be kept.
    """
    if process.poll() is None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


class ApacheKafka:
    """A single-node Apache Kafka broker (combined KRaft controller) for tests.

    Ports are picked on the first :meth:`start` and kept for the lifetime of
    the object, so clients can reconnect to the same :attr:`bootstrap` across
    :meth:`restart`. :meth:`stop` discards the broker's data; :meth:`kill`
    and :meth:`restart` keep it.

    Attributes:
        properties: The effective ``server.properties`` of the broker,
            available after :meth:`start`.
    """

    def __init__(
        self,
        *,
        pom: Path = DEFAULT_POM,
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
        """Configure a broker; nothing is started until :meth:`start`.

        Args:
            pom: The pom pinning the Kafka version (see :func:`resolve_classpath`).
            java: Java executable; defaults to ``$JAVA_HOME/bin/java`` or
                ``java`` on ``PATH``.
            mvn: Maven executable; defaults to ``mvn`` on ``PATH``.
            jvm_opts: Options for the broker JVM.
            broker_properties: Extra or overriding ``server.properties``
                entries, e.g. ``{"num.partitions": 3}``.
            log_level: Root log4j2 level of the broker log.
            base_dir: Parent of the broker's temporary directory; defaults to
                the system temp dir.
            keep_dir: Keep the broker directory after :meth:`stop`; defaults to
                the ``LOCKSTEP_KAFKA_KEEP_DIR`` environment variable.
            startup_timeout: Seconds to wait for the broker to become ready.
            stop_timeout: Seconds to wait after SIGTERM before SIGKILL.
        """
        self._pom = pom
        self._java = java
        self._mvn = mvn
        self._jvm_opts = tuple(jvm_opts)
        self._overrides = dict(broker_properties or {})
        self._log_level = log_level
        self._base_dir = base_dir
        self._keep_dir = _env_flag("LOCKSTEP_KAFKA_KEEP_DIR") if keep_dir is None else keep_dir
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._port: int | None = None
        self._controller_port: int | None = None
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._finalizer: (
            weakref.finalize[[subprocess.Popen[bytes], Path | None], ApacheKafka] | None
        ) = None
        self.properties: dict[str, str] = {}

    # ------------------------------------------------------------------ info
    # bootstrap, port and controller_port raise KafkaBrokerError until the
    # first start() has assigned the ports.

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` bootstrap address of the broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        """The broker (client) listener port."""
        if self._port is None:
            msg = "Kafka broker not started: no port assigned yet"
            raise KafkaBrokerError(msg)
        return self._port

    @property
    def controller_port(self) -> int:
        """The KRaft controller listener port."""
        if self._controller_port is None:
            msg = "Kafka broker not started: no port assigned yet"
            raise KafkaBrokerError(msg)
        return self._controller_port

    @property
    def directory(self) -> Path | None:
        """The broker's temporary directory, or None when there is none."""
        return self._dir

    @property
    def log_file(self) -> Path | None:
        """The broker's combined stdout/stderr/log4j log file, if any."""
        return None if self._dir is None else self._dir / "broker.log"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def is_running(self) -> bool:
        """Whether the broker JVM is alive (not necessarily ready)."""
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """Return the last ``lines`` lines of the broker log, or "" if there is none."""
        log_file = self.log_file
        if log_file is None:
            return ""
        try:
            text = log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return tail(text, lines)

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the broker and wait until it is ready.

        On the first call (or after :meth:`stop`) a fresh directory is created
        and formatted; after :meth:`kill` the existing data is reused, as in
        :meth:`restart`. Does nothing if the broker is already running.

        Raises:
            KafkaBrokerError: If java or mvn is missing, the classpath cannot
                be resolved, formatting fails, the broker exits, or it is not
                ready within ``startup_timeout``. The broker is then killed
                and, if its directory was created by this call, the directory
                is removed (unless ``keep_dir``); the error message carries
                the tail of the broker log.
        """
        if self.is_running:
            return
        java = find_java(self._java)
        classpath = resolve_classpath(self._pom, mvn=self._mvn)
        if self._port is None or self._controller_port is None:
            self._port = _free_port()
            self._controller_port = _free_port()
            while self._controller_port == self._port:
                self._controller_port = _free_port()
        fresh = self._dir is None
        try:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="lockstep-kafka-", dir=self._base_dir))
                self._write_config(self._dir)
                format_storage(java, classpath, self._dir)
            self._launch(java, classpath, self._dir)
            self._wait_ready()
        except BaseException:
            if fresh:
                self.stop()
            else:
                self._kill_process()
            raise

    def stop(self) -> None:
        """Stop the broker gracefully and discard its data.

        Sends SIGTERM, waits up to ``stop_timeout`` seconds, then SIGKILL.
        The directory is removed unless ``keep_dir`` is set. Safe to call
        repeatedly.
        """
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self._stop_timeout)
            except subprocess.TimeoutExpired:
                _log.warning(
                    "Kafka broker pid %d ignored SIGTERM for %.0fs; killing it",
                    process.pid,
                    self._stop_timeout,
                )
        self._kill_process()
        if self._dir is not None:
            if self._keep_dir:
                _log.info("keeping Kafka broker directory %s", self._dir)
            else:
                shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def kill(self) -> None:
        """SIGKILL the broker, keeping its data for a later :meth:`start`."""
        self._kill_process()

    def restart(self, *, hard: bool = False) -> None:
        """Restart the broker on the same ports with the same data.

        Args:
            hard: SIGKILL the broker (simulating a crash) instead of shutting
                it down gracefully.

        Raises:
            KafkaBrokerError: If the broker fails to come back.
        """
        process = self._process
        if hard:
            self._kill_process()
        elif process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self._stop_timeout)
            self._kill_process()
        self.start()

    def __enter__(self) -> Self:
        """Start the broker and return it, running and ready."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the broker."""
        self.stop()

    def __repr__(self) -> str:
        """Describe the broker's address and state."""
        state = "running" if self.is_running else "stopped"
        where = f"127.0.0.1:{self._port}" if self._port is not None else "unassigned"
        return f"<ApacheKafka {where} {state}>"

    # -------------------------------------------------------------- internals

    def _write_config(self, directory: Path) -> None:
        data_dir = directory / "data"
        data_dir.mkdir()
        self.properties = server_properties(
            data_dir, self.port, self.controller_port, self._overrides
        )
        write_config_files(directory, self.properties, self._log_level)

    def _launch(self, java: str, classpath: str, directory: Path) -> None:
        command = [
            *java_command(java, classpath, directory, self._jvm_opts),
            "kafka.Kafka",
            str(directory / "server.properties"),
        ]
        log_handle = (directory / "broker.log").open("ab")
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                cwd=directory,
                # Keep terminal signals (Ctrl-C) for pytest; teardown stops us.
                start_new_session=True,
            )
        except OSError as exc:
            log_handle.close()
            msg = f"cannot launch the Kafka broker JVM: {exc}"
            raise KafkaBrokerError(msg) from exc
        self._process = process
        self._log_handle = log_handle
        self._finalizer = weakref.finalize(
            self, _terminate, process, None if self._keep_dir else directory
        )
        _log.info("started Kafka broker pid %d on %s", process.pid, self.bootstrap)

    def _wait_ready(self) -> None:
        process = self._process
        if process is None:
            msg = "Kafka broker process vanished before it became ready"
            raise KafkaBrokerError(msg)
        wait_ready(process, self.port, self._startup_timeout, self._log_excerpt, _log)

    def _log_excerpt(self) -> str:
        where = str(self.log_file)
        if not self._keep_dir:
            where += " (removed by stop(); keep it with LOCKSTEP_KAFKA_KEEP_DIR=1)"
        return f"broker log {where} ends with:\n{self.log_tail()}"

    def _kill_process(self) -> None:
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
