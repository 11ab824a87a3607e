"""Wait for a freshly launched broker JVM to serve clients.

The probes use aiokafka on a private event loop (any thread without a running loop may
call :func:`wait_ready`): librdkafka's admin client has been seen to abort the whole
process (``rdkafka_queue.h: rd_kafka_enq_once_del_source_return: Assertion
`eonce->refcnt > 0'``) while brokers of a cluster come and go.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from lockstep.errors import KafkaBrokerError

__all__ = ["wait_ready"]

#: A group whose coordinator is looked up (which makes the broker create __consumer_offsets).
_WARMUP_GROUP = "__lockstep_kafka_warmup"


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


async def _listed(admin: AIOKafkaAdminClient, node_id: int) -> str | None:
    """None once the node lists itself in the metadata it serves, else why not."""
    cluster = await admin.describe_cluster()
    if node_id not in {broker["node_id"] for broker in cluster["brokers"]}:
        return f"broker {node_id} not yet in metadata"
    return None


async def _coordinator(admin: AIOKafkaAdminClient) -> str | None:
    """None once a group coordinator answers, else why not."""
    await admin.find_coordinator(_WARMUP_GROUP)
    return None


async def _wait(process: subprocess.Popen[bytes], port: int, node_id: int, limit_s: float,
                log_excerpt: Callable[[], str]) -> None:
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + limit_s
    last_error = "not checked yet"

    def check() -> None:
        code = process.poll()
        if code is not None:
            raise KafkaBrokerError(
                f"Kafka broker exited with code {code} during start-up; {log_excerpt()}")
        if time.monotonic() > deadline:
            raise KafkaBrokerError(f"Kafka broker on {bootstrap} not ready after "
                                   f"{limit_s:.0f}s ({last_error}); {log_excerpt()}")

    while not _port_open(port):
        last_error = "listener not open"
        check()
        await asyncio.sleep(0.1)
    admin: AIOKafkaAdminClient | None = None
    probes: list[Callable[[AIOKafkaAdminClient], Awaitable[str | None]]] = [
        lambda a: _listed(a, node_id), _coordinator]
    try:
        while probes:
            check()
            try:
                if admin is None:
                    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap,
                                                request_timeout_ms=2000)
                    await asyncio.wait_for(admin.start(), 5.0)
                error = await asyncio.wait_for(probes[0](admin), 5.0)
            except (KafkaError, OSError, TimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc}"
                if admin is not None:
                    await admin.close()
                    admin = None
            if error is None:
                probes.pop(0)
            else:
                last_error = error
                await asyncio.sleep(0.2)
    finally:
        if admin is not None:
            await admin.close()


def wait_ready(process: subprocess.Popen[bytes], port: int, node_id: int, timeout: float,
               log_excerpt: Callable[[], str]) -> None:
    """Block until the node on ``port`` serves metadata and group coordination.

    Readiness has three steps: the client listener accepts TCP, the node is registered
    in the metadata it serves, and a group coordinator answers. The last step makes the
    cluster create ``__consumer_offsets`` now, instead of during the first consumer
    group's join. Call it where no event loop runs (it runs one of its own).

    Args:
        process: The node's JVM, checked for premature exit.
        port: The node's client listener port on 127.0.0.1.
        node_id: The node's ``node.id``.
        timeout: Seconds, for all three steps together.
        log_excerpt: Describes the node's log; appended to error messages.

    Raises:
        KafkaBrokerError: If the JVM exits or the node is not ready in time.
    """
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_wait(process, port, node_id, timeout, log_excerpt))
    finally:
        loop.close()
