"""Publishing tokens: the :class:`Publisher` API and synthetic streams (the demo).

:class:`Publisher` is the producer's Python API on confluent-kafka: tokens keyed by
``stream_id`` to their ``media.*`` topic with the Java-compatible murmur2 partitioner,
idempotence on, batching, compression, delivery reports, and a bound on the data in flight
(``publish`` blocks while it is full). :func:`publish_synthetic` (``lockstep publish
--synthetic``, the demo) produces each synthetic token when its capture time comes. The
``publish`` stage latency is capture time → broker acknowledgement.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from lockstep.errors import BrokerError
from lockstep.streams.aligner import TokenKey
from lockstep.streams.settings import KafkaSettings
from lockstep.streams.synthetic import SyntheticConfig, SyntheticStream
from lockstep.streams.telemetry import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.schemas import Token

#: Records that are not Lockstep tokens, published by ``--inject-bad`` to show dead-lettering.
BAD_RECORDS: tuple[bytes, ...] = (
    b"not a lockstep record",
    b"LS\x09\x01unsupported version",
    b"LS\x01\x01\xc1",  # valid header, broken MessagePack
)


@dataclass
class PublishReport:
    """What was published: the ledger's left-hand side."""

    keys: set[TokenKey] = field(default_factory=set)
    by_modality: Counter[str] = field(default_factory=Counter)
    bad_records: int = 0
    seconds: float = 0.0


def producer(kafka: KafkaSettings) -> AIOKafkaProducer:
    """An aiokafka producer tuned for media: 1 MB batches, 2 ms linger, all acks."""
    return AIOKafkaProducer(
        **kafka.aiokafka_options(),
        acks="all",
        linger_ms=2,
        max_batch_size=1_048_576,
        max_request_size=kafka.max_record_bytes,
    )


async def publish_synthetic(
    kafka: KafkaSettings,
    stream_ids: Sequence[str],
    seconds: float,
    telemetry: Telemetry,
    *,
    config: SyntheticConfig | None = None,
    configs: Mapping[str, SyntheticConfig] | None = None,
    inject_bad: int = 0,
    tick_s: float = 0.005,
) -> PublishReport:
    """Publish synthetic streams for ``seconds`` of wall time, paced by capture time.

    Args:
        kafka: Connection settings.
        stream_ids: One synthetic stream per id.
        seconds: How long to publish.
        telemetry: Receives the ``publish`` stage latency.
        config: Rates and sizes of the streams.
        configs: Per-stream configurations that override ``config``.
        inject_bad: Also publish this many undecodable records (spread over the run).
        tick_s: Pacing interval.
    """
    report = PublishReport()
    start_us = time.time_ns() // 1000
    sources = [SyntheticStream(sid, start_us, (configs or {}).get(sid) or config
                               or SyntheticConfig()) for sid in stream_ids]
    pending: list[asyncio.Future[Any]] = []
    bad_every = seconds / (inject_bad + 1) if inject_bad else 0.0
    begin = time.monotonic()
    prod = producer(kafka)
    await prod.start()
    try:
        while (elapsed := time.monotonic() - begin) < seconds:
            now_us = time.time_ns() // 1000
            for source in sources:
                for token in source.due(now_us):
                    future = await prod.send(catalog.MEDIA[token.modality], encode(token),
                                             key=token.stream_id.encode())
                    future.add_done_callback(_acked(telemetry, token.t_us,
                                                    token.modality.value))
                    pending.append(future)
                    report.keys.add(TokenKey(token.stream_id, token.modality, token.seq))
                    report.by_modality[token.modality.value] += 1
            if inject_bad and report.bad_records < inject_bad and elapsed >= bad_every * (
                    report.bad_records + 1):
                value = BAD_RECORDS[report.bad_records % len(BAD_RECORDS)]
                topic = list(catalog.MEDIA.values())[report.bad_records % len(catalog.MEDIA)]
                pending.append(await prod.send(topic, value, key=stream_ids[0].encode()))
                report.bad_records += 1
            pending = [f for f in pending if not f.done()]
            await asyncio.sleep(tick_s)
        await prod.flush()
        await asyncio.gather(*pending)
    finally:
        await prod.stop()
    report.seconds = time.monotonic() - begin
    return report


def _acked(telemetry: Telemetry, capture_us: int, modality: str) -> Any:
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            telemetry.stage("publish", max(0.0, (time.time_ns() // 1000 - capture_us) / 1e6))
            telemetry.token(modality, "published")  # the ledger's left-hand side
    return done


Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]


@dataclass(frozen=True)
class DeliveryStats:
    """What a :class:`Publisher` has sent and what the broker acknowledged."""

    sent: Mapping[str, int]
    acked: Mapping[str, int]
    failed: Mapping[str, int]
    bytes_sent: int
    #: The first delivery errors, for the report.
    errors: tuple[str, ...]

    @property
    def in_flight(self) -> int:
        """Tokens sent but neither acknowledged nor failed yet."""
        return sum(self.sent.values()) - sum(self.acked.values()) - sum(self.failed.values())


class Publisher:
    """Publishes tokens to their ``media.*`` topics; thread-safe.

    Use as a context manager, or call :meth:`close` (which flushes) when done::

        with Publisher(settings.kafka) as publisher:
            publisher.publish(token)
        publisher.stats()
    """

    def __init__(self, kafka: KafkaSettings, *, compression: Compression = "lz4",
                 linger_ms: float = 5.0, batch_bytes: int = 1_048_576,
                 max_in_flight_bytes: int = 64 * 1_048_576, idempotence: bool = True,
                 telemetry: Telemetry | None = None, block_timeout_s: float = 30.0) -> None:
        """Create the producer.

        Args:
            kafka: Connection settings (``confluent_extra`` passes through last).
            compression: Batch compression (lz4/zstd/snappy readers need cramjam).
            linger_ms: How long a batch may wait to fill.
            batch_bytes: Largest batch per partition.
            max_in_flight_bytes: Data produced but not yet acknowledged; :meth:`publish`
                blocks while more would be in flight.
            idempotence: Broker-side de-duplication of retries (needs a Kafka cluster;
                the embedded broker does not support it).
            telemetry: Receives the ``publish`` latency (capture → ack) when given; give
                it only when ``t_us`` is the wall clock (real-time capture).
            block_timeout_s: How long :meth:`publish` waits for room before failing.
        """
        config: dict[str, Any] = {
            **kafka.confluent_config(),
            "partitioner": "murmur2_random",  # Java-compatible: co-partitioning (wire §5)
            "enable.idempotence": idempotence,
            "acks": "all",
            "compression.type": compression,
            "linger.ms": linger_ms,
            "batch.size": batch_bytes,
            "message.max.bytes": kafka.max_record_bytes,
            "queue.buffering.max.kbytes": max(1, max_in_flight_bytes // 1024),
            "queue.buffering.max.messages": 1_000_000,
        }
        config.update(kafka.confluent_extra)
        self._producer = Producer(config)
        self._telemetry = telemetry
        self._block_timeout_s = block_timeout_s
        self._lock = threading.Lock()
        self._sent: Counter[str] = Counter()
        self._acked: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()
        self._bytes = 0
        self._errors: list[str] = []

    def publish(self, token: Token) -> None:
        """Encode and produce one token; block while the in-flight bound is reached.

        Raises:
            BrokerError: No room in flight within ``block_timeout_s``, or the producer
                rejected the record (e.g. larger than ``message.max.bytes``).
        """
        value = encode(token)
        modality = token.modality.value
        callback = self._on_delivery(modality, token.t_us)
        deadline = time.monotonic() + self._block_timeout_s
        while True:
            try:
                self._producer.produce(catalog.MEDIA[token.modality], value,
                                       key=token.stream_id.encode(), on_delivery=callback)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise BrokerError(f"no room in the producer queue for "
                                      f"{self._block_timeout_s:.0f} s: is the broker up?"
                                      ) from None
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise BrokerError(f"cannot produce a {modality} token: {exc}") from None
        with self._lock:
            self._sent[modality] += 1
            self._bytes += len(value)
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for every delivery report; return the number still in flight."""
        remaining: int = self._producer.flush(timeout_s)
        return remaining

    def close(self, timeout_s: float = 30.0) -> int:
        """Flush; return the number of tokens still undelivered."""
        return self.flush(timeout_s)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> DeliveryStats:
        """A snapshot of what was sent, acknowledged and failed."""
        with self._lock:
            return DeliveryStats(dict(self._sent), dict(self._acked), dict(self._failed),
                                 self._bytes, tuple(self._errors))

    def _on_delivery(self, modality: str, capture_us: int) -> Any:
        def done(error: KafkaError | None, message: Message) -> None:
            del message
            with self._lock:
                if error is not None:
                    self._failed[modality] += 1
                    if len(self._errors) < 10:
                        self._errors.append(f"{modality}: {error.str()}")
                    return
                self._acked[modality] += 1
                if self._telemetry is not None:  # under the lock: callbacks run in any thread
                    self._telemetry.stage(
                        "publish", max(0.0, (time.time_ns() // 1000 - capture_us) / 1e6))
                    self._telemetry.token(modality, "published")
        return done
