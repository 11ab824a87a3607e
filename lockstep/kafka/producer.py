"""librdkafka producers: acknowledged, retried, bounded, keyed as the Java clients key.

:class:`AsyncLibrdkafkaProducer` is the roles' (their outbox's) on an event loop
(``kafka.producer_client = librdkafka``). :class:`LibrdkafkaProducer` is the client
under :class:`~lockstep.producer.publisher.Publisher`: records keyed by stream id go to
their partition with the Java-compatible murmur2 partitioner (so every ``media.*`` topic
places a stream alike), with idempotence, batching, compression and a bound on the data
in flight (:meth:`LibrdkafkaProducer.produce` blocks while it is full). librdkafka
retries a failed delivery (broker restart, leader change, timeout) until the delivery
timeout; each record's report then reaches the callback it was produced with. A broker
that cannot be reached is told to an :class:`~lockstep.kafka.retry.OutageLog`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, TypeAlias

from confluent_kafka import KafkaError, KafkaException, Producer

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError, DeliveryFailed
from lockstep.kafka.logfilter import LIBRDKAFKA
from lockstep.kafka.retry import OutageLog

Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
log = logging.getLogger(__name__)
#: How long the async producer's poller waits for delivery reports in one call, seconds.
POLL_S = 0.05
#: How long a full local queue is waited out between two attempts to queue a record.
FULL_QUEUE_WAIT_S = 0.002

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


def producer_config(kafka: KafkaSettings, *, compression: Compression, linger_ms: float,
                    batch_bytes: int, max_in_flight_bytes: int, idempotence: bool,
                    delivery_timeout_s: float) -> dict[str, Any]:
    """Options of a librdkafka producer: keyed as the Java clients key, all replicas ack.

    ``kafka.confluent_extra`` passes through last.
    """
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
    }
    config.update(kafka.confluent_extra)
    return config


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
        config = producer_config(kafka, compression=compression, linger_ms=linger_ms,
                                 batch_bytes=batch_bytes, max_in_flight_bytes=max_in_flight_bytes,
                                 idempotence=idempotence, delivery_timeout_s=delivery_timeout_s)
        config["error_cb"] = self._on_error
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


Delivered: TypeAlias = "tuple[asyncio.Future[None], DeliveryFailed | None]"


def delivery_error(error: KafkaError) -> DeliveryFailed:
    """A delivery report's error as Lockstep's, with librdkafka's verdict on retrying."""
    retriable = bool(error.retriable()) or error.code() in (
        KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT)
    return DeliveryFailed(f"{error.name()}: {error.str()}", retriable=retriable and
                          not error.fatal())


class AsyncLibrdkafkaProducer:
    """librdkafka for one event loop, shaped like aiokafka's producer (the roles' outbox).

    Records are handed to librdkafka without leaving the loop (``produce`` only queues
    them; batching and the network run in librdkafka's threads, in C). A poller thread
    serves the delivery reports and resolves the futures on the loop, one
    ``call_soon_threadsafe`` per poll however many reports it carried. What fails after
    librdkafka's own retries (within ``message.timeout.ms``) reaches the future as
    :class:`~lockstep.errors.DeliveryFailed`, retriable or not as librdkafka says.

    Args:
        config: librdkafka options (:func:`producer_config`).
        connect_timeout_s: How long :meth:`start` waits for the cluster's metadata.
    """

    def __init__(self, config: dict[str, Any], *, connect_timeout_s: float = 5.0) -> None:
        self._config = config
        self._connect_timeout_s = connect_timeout_s
        self._producer: Producer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: threading.Thread | None = None
        self._stopping = threading.Event()
        self._reports: list[Delivered] = []

    async def start(self) -> None:
        """Create the client and check that the cluster answers.

        Raises:
            DeliveryFailed: The cluster did not answer within ``connect_timeout_s``
                (retriable: the caller waits for the broker and starts again).
        """
        self._loop = asyncio.get_running_loop()
        producer = Producer({**self._config, "error_cb": self._client_error})
        try:
            await asyncio.to_thread(producer.list_topics, timeout=self._connect_timeout_s)
        except KafkaException as exc:
            producer.flush(0)
            raise DeliveryFailed(f"cannot reach the cluster: {exc}", retriable=True) from exc
        self._producer = producer
        self._stopping.clear()
        self._poller = threading.Thread(target=self._poll, name="rdkafka-deliveries",
                                        daemon=True)
        self._poller.start()

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None
                   ) -> asyncio.Future[None]:
        """Queue one record; the future resolves once the broker has it (or fails).

        Waits only while librdkafka's local queue is full (backpressure).
        """
        assert self._producer is not None and self._loop is not None, "start() first"
        future: asyncio.Future[None] = self._loop.create_future()
        report = functools.partial(self._report, future)
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=report)
                return future
            except BufferError:
                await asyncio.sleep(FULL_QUEUE_WAIT_S)
            except KafkaException as exc:  # refused locally (too large, bad topic name)
                raise DeliveryFailed(str(exc), retriable=False) from exc

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Deliver what is queued (at most ``timeout_s``), then close.

        The poller stops first: the flush serves the last reports, in one thread.
        """
        producer = self._producer
        if producer is None:
            return
        self._stopping.set()
        if self._poller is not None:
            await asyncio.to_thread(self._poller.join)
        self._hand_over()
        left = await asyncio.to_thread(producer.flush, timeout_s)
        self._hand_over()
        if left:
            log.warning("%d records not delivered when the producer stopped", left)
        self._producer = None

    def _report(self, future: asyncio.Future[None], error: KafkaError | None,
                _message: Any) -> None:
        # In the poller thread (or the final flush's): resolved on the loop after the poll.
        self._reports.append((future, None if error is None else delivery_error(error)))

    def _poll(self) -> None:
        producer = self._producer
        assert producer is not None
        while not self._stopping.is_set():
            producer.poll(POLL_S)
            self._hand_over()

    def _hand_over(self) -> None:
        if not self._reports or self._loop is None or self._loop.is_closed():
            return
        reports, self._reports = self._reports, []
        self._loop.call_soon_threadsafe(_resolve, reports)

    def _client_error(self, error: KafkaError) -> None:
        # Connection trouble is reported per delivery; only a fatal error needs a line here.
        if error.fatal():
            log.error("the producer failed: %s", error.str())


def _resolve(reports: list[Delivered]) -> None:
    for future, error in reports:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
