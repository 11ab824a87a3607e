"""A librdkafka producer for publishers: acknowledged, retried, bounded, its outages logged.

:class:`LibrdkafkaProducer` is the client under :class:`~lockstep.producer.publisher.Publisher`:
records keyed by stream id go to their partition with the Java-compatible murmur2
partitioner (so every ``media.*`` topic places a stream alike), with idempotence,
batching, compression and a bound on the data in flight (:meth:`LibrdkafkaProducer.produce`
blocks while it is full). librdkafka retries a failed delivery (broker restart, leader
change, timeout) until the delivery timeout; each record's report then reaches the
callback it was produced with. A broker that cannot be reached is told to an
:class:`~lockstep.kafka.retry.OutageLog`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, TypeAlias

from confluent_kafka import KafkaError, KafkaException, Producer

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError
from lockstep.kafka.logfilter import LIBRDKAFKA
from lockstep.kafka.retry import OutageLog

Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]

#: librdkafka errors that mean no broker can be reached (the rest are logged, not counted).
_UNREACHABLE = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                          KafkaError._TRANSPORT})


class DeliveryError(Protocol):
    """Why a record was not delivered (librdkafka's error)."""

    def str(self) -> str:
        """What failed, for people."""


#: A delivery report: the error (None once the broker acknowledged the record) and the
#: record as the client reports it.
OnDelivery: TypeAlias = Callable[[DeliveryError | None, Any], None]


class LibrdkafkaProducer:
    """A confluent-kafka producer with backpressure and an outage log; thread-safe.

    Args:
        kafka: Connection settings (``confluent_extra`` passes through last).
        outage: Told of unreachable brokers, acknowledgements and records waiting.
        compression: Batch compression (lz4/zstd/snappy readers need cramjam).
        linger_ms: How long a batch may wait to fill.
        batch_bytes: Largest batch per partition.
        max_in_flight_bytes: Data produced but not yet acknowledged; :meth:`produce`
            blocks while more would be in flight.
        idempotence: Broker-side de-duplication of retries (needs a Kafka cluster; the
            embedded broker does not support it).
        delivery_timeout_s: Time from :meth:`produce` to acknowledgement, retries
            included, after which a record's report says it failed.
        block_timeout_s: How long :meth:`produce` waits for room before failing.
        on_fatal: Called with the error's text when the client fails for good.
    """

    def __init__(self, kafka: KafkaSettings, outage: OutageLog, *,
                 compression: Compression, linger_ms: float, batch_bytes: int,
                 max_in_flight_bytes: int, idempotence: bool, delivery_timeout_s: float,
                 block_timeout_s: float, on_fatal: Callable[[str], None]) -> None:
        timeout_ms = max(1, round(delivery_timeout_s * 1000))
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
            "message.timeout.ms": timeout_ms,
            "request.timeout.ms": min(30_000, timeout_ms),
            "logger": logging.getLogger(LIBRDKAFKA),
            "error_cb": self._on_error,
        }
        config.update(kafka.confluent_extra)
        self.outage = outage
        self.block_timeout_s = block_timeout_s
        self._on_fatal = on_fatal
        self._producer = Producer(config)

    def wait_for_topics(self, topics: Iterable[str], timeout_s: float,
                        missing_timeout_s: float) -> None:
        """Wait for the broker (with backoff, up to ``timeout_s``) and for ``topics``.

        Raises:
            BrokerError: The broker stayed unreachable, or a topic does not exist after
                ``missing_timeout_s``.
        """
        names = list(topics)
        begin = time.monotonic()
        pause = 0.2
        while True:
            try:
                metadata = self._producer.list_topics(timeout=min(5.0, max(0.5, timeout_s)))
            except KafkaException as exc:
                problem = f"broker {self.outage.bootstrap} unreachable: {exc.args[0].str()}"
                self.outage.trouble(problem)
                self.outage.check(0, connecting=True)
                if time.monotonic() - begin + pause > timeout_s:
                    raise BrokerError(f"{problem} (waited {timeout_s:.0f} s)") from None
            else:
                self.outage.progress()
                missing = sorted(n for n in names if n not in metadata.topics
                                 or metadata.topics[n].error is not None)
                if not missing:
                    return
                if time.monotonic() - begin > min(timeout_s, missing_timeout_s):
                    raise BrokerError(f"topics {', '.join(missing)} do not exist")
            time.sleep(pause)
            pause = min(pause * 2, 5.0)

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: OnDelivery, *,
                what: str) -> None:
        """Produce one record, blocking while the in-flight bound is reached.

        The caller counts it, then calls :meth:`serve`, which may run ``on_delivery``.

        Raises:
            BrokerError: No room in flight within ``block_timeout_s``, or the client
                refused ``what`` (e.g. larger than ``message.max.bytes``).
        """
        deadline = time.monotonic() + self.block_timeout_s
        while True:
            try:
                self._producer.produce(topic, value, key=key, on_delivery=on_delivery)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise BrokerError(f"no room in the producer queue for "
                                      f"{self.block_timeout_s:.0f} s: is the broker up?"
                                      ) from None
                self._producer.poll(0.05)
                self.outage.check(len(self._producer))
            except KafkaException as exc:
                raise BrokerError(f"cannot produce {what}: {exc}") from None

    def serve(self) -> None:
        """Run the delivery reports that are due; note an outage."""
        self._producer.poll(0)
        self.outage.check(len(self._producer))

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every delivery report; return how many are missing."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining: int = self._producer.flush(
                max(0.0, min(1.0, deadline - time.monotonic())))
            self.outage.check(remaining)
            if not remaining or time.monotonic() >= deadline:
                return remaining

    def _on_error(self, error: KafkaError) -> None:
        if error.code() in _UNREACHABLE:
            self.outage.trouble(error.str())
        if error.fatal():
            self._on_fatal(error.str())
