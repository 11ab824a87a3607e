"""Kafka clients built from the settings, the same way wherever they are needed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Protocol, Self, cast

from aiokafka import AIOKafkaProducer

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.producer import AsyncLibrdkafkaProducer, producer_config

#: The largest batch a producer sends to a partition at once.
BATCH_BYTES = 1_048_576
#: Data an asyncio librdkafka producer holds unacknowledged before ``send`` waits for room.
IN_FLIGHT_BYTES = 256 * 1_048_576


def producer(kafka: KafkaSettings, *, linger_ms: float | None = None, acks: int | str = "all",
             batch_bytes: int = BATCH_BYTES, request_timeout_ms: int = 30_000
             ) -> AIOKafkaProducer:
    """An aiokafka producer: 1 MB batches, ``kafka.linger_ms``, every replica acknowledges.

    The roles' :class:`~lockstep.kafka.outbox.Outbox` and the synthetic publisher's
    :class:`~lockstep.kafka.sender.RetryingSender` produce through one each, as do the
    probes of :mod:`lockstep.kafka.probes`.
    """
    return AIOKafkaProducer(
        **kafka.aiokafka_options(), acks=acks,
        linger_ms=kafka.linger_ms if linger_ms is None else linger_ms,
        max_batch_size=batch_bytes, max_request_size=kafka.max_record_bytes,
        request_timeout_ms=request_timeout_ms)


class RecordProducer(Protocol):
    """What :class:`~lockstep.kafka.outbox.Outbox` produces through (either client)."""

    async def start(self) -> None:
        """Connect (raises a retriable error while the cluster is away)."""

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None
                   ) -> asyncio.Future[Any]:
        """Queue a record; the future resolves once the broker has it."""

    async def stop(self) -> None:
        """Deliver what is queued and close."""


def asyncio_producer(kafka: KafkaSettings, *, request_timeout_s: float = 30.0
                     ) -> RecordProducer:
    """An event loop's producer on the client ``kafka.producer_client`` names.

    Either way: no idempotence (the embedded broker refuses it), 1 MB batches,
    ``kafka.linger_ms``, and an attempt given up after ``request_timeout_s`` (the caller
    sends it again: the roles' outbox, the synthetic publisher's sender).
    """
    if kafka.producer_client == "librdkafka":
        return AsyncLibrdkafkaProducer(producer_config(
            kafka, compression="none", linger_ms=kafka.linger_ms, batch_bytes=BATCH_BYTES,
            max_in_flight_bytes=IN_FLIGHT_BYTES, idempotence=False,
            delivery_timeout_s=request_timeout_s))
    return cast(RecordProducer,
                producer(kafka, request_timeout_ms=round(request_timeout_s * 1000)))


def role_producer(kafka: KafkaSettings) -> RecordProducer:
    """The roles' producer (their outbox's)."""
    return asyncio_producer(kafka)


class RawWriter:
    """Writes records as given, each once (no retry), and says where each one landed.

    For records nobody on the team would write (``lockstep chaos``'s hostile input): use
    as an async context manager.
    """

    def __init__(self, kafka: KafkaSettings, *, linger_ms: float = 5.0) -> None:
        self._producer = producer(kafka, linger_ms=linger_ms, request_timeout_ms=40_000)

    async def __aenter__(self) -> Self:
        await self._producer.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self._producer.stop()

    async def write(self, records: Sequence[tuple[str, bytes | None, bytes | None]]
                    ) -> list[tuple[str, int, int] | BaseException]:
        """Produce ``(topic, key, value)`` records and wait for each one's outcome.

        Returns:
            Per record, (topic, partition, offset) once acknowledged, or its error.
        """
        futures = [await self._producer.send(topic, value, key=key)
                   for topic, key, value in records]
        results = await asyncio.gather(*futures, return_exceptions=True)
        return [r if isinstance(r, BaseException) else (r.topic, r.partition, r.offset)
                for r in results]
