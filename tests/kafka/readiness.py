"""Wait for a freshly launched broker JVM to become usable by tests."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, NoReturn

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.kafka.broker_setup import NODE_ID
from tests.kafka.errors import KafkaBrokerError

if TYPE_CHECKING:
    import logging
    import subprocess
    from collections.abc import Callable

__all__ = ["wait_ready"]


def _probe_metadata(admin: AdminClient, timeout: float) -> str | None:
    """Return None once the broker lists itself in metadata, else why not."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        return f"metadata request failed: {exc}"
    if NODE_ID not in metadata.brokers:
        return f"broker {NODE_ID} not yet in metadata"
    return None


def _probe_group_coordinator(admin: AdminClient, timeout: float) -> str | None:
    """Return None once the group coordinator answers, else why not."""
    group = "__lockstep_test_kafka_warmup"
    future = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
    try:
        future.result()
    except KafkaException as exc:
        return f"group coordinator not available: {exc}"
    return None


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def wait_ready(
    process: subprocess.Popen[bytes],
    port: int,
    timeout: float,
    log_excerpt: Callable[[], str],
    logger: logging.Logger,
) -> None:
    """Block until the broker on ``port`` serves metadata and group coordination.

    Readiness has three steps: the client listener accepts TCP (cheap, and
    keeps librdkafka from logging connection-refused errors), the broker
    is registered in the metadata it serves, and the group coordinator
    answers. The last step makes the broker create ``__consumer_offsets``
    now, instead of during the first test's consumer-group join (where
    clients log a spurious GroupCoordinatorNotAvailable error).

    Args:
        process: The broker JVM, checked for premature exit.
        port: The broker's client listener port on 127.0.0.1.
        timeout: Seconds, for all three steps together.
        log_excerpt: Describes the broker log; appended to error messages.
        logger: Receives the admin client's librdkafka logs.

    Raises:
        KafkaBrokerError: If the JVM exits or the broker is not ready in time.
    """
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout

    def check_alive() -> None:
        code = process.poll()
        if code is not None:
            msg = f"Kafka broker exited with code {code} during start-up; {log_excerpt()}"
            raise KafkaBrokerError(msg)

    def give_up(last_error: str) -> NoReturn:
        msg = (
            f"Kafka broker on {bootstrap} not ready after "
            f"{timeout:.0f}s ({last_error}); {log_excerpt()}"
        )
        raise KafkaBrokerError(msg)

    def poll(probe: Callable[[float], str | None]) -> None:
        # probe gets a request timeout and returns None when ready, else why not.
        last_error = "not checked yet"
        while True:
            check_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                give_up(last_error)
            error = probe(max(0.5, min(2.0, remaining)))
            if error is None:
                return
            last_error = error
            time.sleep(0.1)

    poll(lambda _: None if _port_open(port) else "listener not open")
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 2000,
        },
        logger=logger,
    )
    poll(lambda request_timeout: _probe_metadata(admin, request_timeout))
    poll(lambda request_timeout: _probe_group_coordinator(admin, request_timeout))
