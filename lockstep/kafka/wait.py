"""Waiting for a Kafka cluster that is not there yet (or restarting), quietly.

A role started before its broker, or while it restarts, retries with exponential backoff
and logs one line per interval instead of failing or flooding the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError, KafkaError

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError, DeliveryFailed

log = logging.getLogger(__name__)


async def wait_for_broker(connect: Callable[[], Awaitable[None]], kafka: KafkaSettings, *,
                          what: str, timeout_s: float | None = None,
                          log_every_s: float = 10.0, max_backoff_s: float = 5.0) -> None:
    """Call ``connect`` until it succeeds.

    Args:
        connect: Starts a client (raises a Kafka connection error while the cluster is away).
        kafka: Settings (for the bootstrap address in messages).
        what: What is connecting, for the log line.
        timeout_s: Give up after this long (None: never).
        log_every_s: At most one "still waiting" line per this many seconds.
        max_backoff_s: Longest pause between two attempts.

    Raises:
        BrokerError: ``timeout_s`` passed without a connection.
    """
    began = time.monotonic()
    logged = 0.0
    delay = 0.2
    while True:
        try:
            await connect()
        except (KafkaConnectionError, KafkaError, OSError, DeliveryFailed) as error:
            if isinstance(error, DeliveryFailed) and not error.retriable:
                raise
            waited = time.monotonic() - began
            if timeout_s is not None and waited >= timeout_s:
                raise BrokerError(f"cannot reach Kafka at {kafka.bootstrap_servers} "
                                  f"({what}) after {waited:.0f} s: {error}") from None
            # A bounded wait is a command's: it reports the failure itself, in one line.
            if timeout_s is None and time.monotonic() - logged >= log_every_s:
                logged = time.monotonic()
                log.warning("waiting for Kafka at %s (%s): %s", kafka.bootstrap_servers, what,
                            str(error)[:200])
            remaining = None if timeout_s is None else timeout_s - waited
            await asyncio.sleep(delay if remaining is None else max(0.0, min(delay, remaining)))
            delay = min(max_backoff_s, delay * 2)
            continue
        if logged:
            log.warning("connected to Kafka at %s (%s) after %.0f s", kafka.bootstrap_servers,
                        what, time.monotonic() - began)
        return


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str,
                           timeout_s: float = 15.0) -> list[TopicPartition]:
    """The partitions of ``topic`` (waiting up to ``timeout_s`` for it to exist).

    Raises:
        BrokerError: The topic does not exist after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        parts = (await cluster_metadata(consumer)).partitions_for_topic(topic)
        if parts:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        if time.monotonic() > deadline:
            raise BrokerError(f"topic {topic} does not exist (lockstep topics create)")
        await asyncio.sleep(0.2)


async def cluster_metadata(consumer: AIOKafkaConsumer) -> Any:
    """Fresh metadata of every topic (aiokafka's ``ClusterMetadata``).

    ``AIOKafkaConsumer.partitions_for_topic`` only knows topics the client already tracks
    (subscribed or assigned ones); this asks the cluster.
    """
    return await consumer._client.fetch_all_metadata()


async def reach(kafka: KafkaSettings, timeout_s: float) -> None:
    """Return once a bootstrap server answers; fail within ``timeout_s`` otherwise.

    Raises:
        BrokerError: No bootstrap server answered (the message names them).
    """
    client = AIOKafkaClient(**kafka.aiokafka_options(), request_timeout_ms=int(timeout_s * 1000))
    try:
        await wait_for_broker(client.bootstrap, kafka, what="checking the cluster",
                              timeout_s=timeout_s)
    finally:
        await client.close()
