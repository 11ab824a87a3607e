"""Producing from agents: delivery callbacks, retries through broker outages, dead letters.

An agent hands every record it produces to an :class:`Outbox` with the acknowledgement of
the input records it settles (``on_ack``). The callback runs only once the broker has the
record; until then the inputs stay unacknowledged and their offsets uncommitted
(:mod:`lockstep.streams.offsets`). A delivery that fails for a reason a retry can fix
(broker restarting, leader moving, timeout) is sent again with backoff, as long as it
takes: nothing is dropped, and an outage is logged once per interval, not per record. A
failure no retry can fix fails the role (:meth:`Outbox.raise_if_failed`), which leaves
its inputs for the next owner of the partitions.

Dead letters and late records always fit the topic: a payload too large is truncated and
identified by its size and SHA-256 (:func:`fit_payload`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from lockstep.errors import BadInput, BrokerError
from lockstep.kafka.clients import RecordProducer
from lockstep.kafka.retry import SEND_ERRORS, OutageLog, retriable
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.schemas import DeadLetter, LateToken

log = logging.getLogger(__name__)

#: Room left in a dead letter or late record for everything but the payload.
ENVELOPE_BYTES = 16 * 1024
#: Longest payload a dead letter carries whole (the rest is identified by size and hash).
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_KEY_BYTES = 1024
MAX_REASON_CHARS = 2000
#: What a record adds to its value and key in a batch; the broker's limit is on the batch.
RECORD_OVERHEAD = 512


def wall_us() -> int:
    """The wall clock in integer microseconds since the Unix epoch."""
    return time.time_ns() // 1000


def fit_payload(value: bytes | None, max_record_bytes: int) -> tuple[bytes | None, int, str, bool]:
    """A payload cut to fit a side-topic record, with the original's size and SHA-256.

    Returns:
        (payload, original size, original SHA-256 hex, truncated)
    """
    if value is None:
        return None, 0, "", False
    limit = max(0, min(MAX_PAYLOAD_BYTES, max_record_bytes - ENVELOPE_BYTES))
    digest = hashlib.sha256(value).hexdigest()
    if len(value) <= limit:
        return value, len(value), digest, False
    return value[:limit], len(value), digest, True


def dead_letter_record(*, stage: str, topic: str, partition: int, offset: int,
                       error: BadInput, key: bytes | None, value: bytes | None,
                       max_record_bytes: int) -> DeadLetter:
    """The dead letter of one input record; it always fits ``max_record_bytes``."""
    payload, size, digest, cut = fit_payload(value, max_record_bytes)
    key_cut = key is not None and len(key) > MAX_KEY_BYTES
    return DeadLetter(
        stage=stage, topic=topic, partition=partition, offset=offset,
        reason=error.reason[:MAX_REASON_CHARS], error=type(error).__name__, code=error.code,
        key=key[:MAX_KEY_BYTES] if key is not None else None, value=payload, at_us=wall_us(),
        value_size=size, value_sha256=digest, truncated=cut or key_cut)


def fit_late(late: LateToken, max_record_bytes: int) -> LateToken:
    """A late record whose carried token fits ``max_record_bytes``."""
    if late.value is None:
        return late  # it carries no token (a stale one stays in its media topic)
    payload, size, digest, cut = fit_payload(late.value, max_record_bytes)
    return late.model_copy(update={"value": payload, "value_size": size,
                                   "value_sha256": digest, "truncated": cut})


class Outbox:
    """The process's producer, shared by its roles.

    Args:
        producer: A started-or-not producer, aiokafka's or librdkafka's
            (:func:`~lockstep.kafka.clients.role_producer`; :meth:`start` starts it).
        max_record_bytes: The topics' ``max.message.bytes``.
        bootstrap: The brokers, as the outage lines name them.
        outage_log_s: At most one outage line per this many seconds.
        max_backoff_s: Longest wait between two attempts of one record.
    """

    def __init__(self, producer: RecordProducer, max_record_bytes: int, *,
                 bootstrap: str = "kafka", outage_log_s: float = 10.0,
                 max_backoff_s: float = 5.0) -> None:
        self._producer = producer
        self.max_record_bytes = max_record_bytes
        self._max_backoff_s = max_backoff_s
        self.outage = OutageLog(bootstrap, interval_s=outage_log_s, stall_s=0.0,
                                told_of_failures=True, noun="records", stage="produce",
                                logger=log)
        self._failure: BaseException | None = None
        self._in_flight = 0
        #: Records handed over and not yet acknowledged, by a serial number.
        self._unacked: dict[int, tuple[str, bytes | None, bytes]] = {}
        self._serial = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._retrying = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: Told of every dead letter sent (stage, error class): the metrics.
        self.on_dead_letter: Callable[[str, str], None] = lambda stage, error: None

    @property
    def in_flight(self) -> int:
        """Records handed over and not yet acknowledged (retries included)."""
        return self._in_flight

    def unacknowledged(self, topics: Sequence[str]) -> list[tuple[str, bytes | None, bytes]]:
        """(topic, key, value) of the records to ``topics`` not acknowledged yet.

        They are as good as written: each is re-sent until the broker has it, or the role
        fails. A takeover's read-back of what was produced counts them too, so an input
        replayed while its output waits out an outage is not decided a second time (with
        other bytes) but recognised as answered.
        """
        wanted = set(topics)
        return [record for record in self._unacked.values() if record[0] in wanted]

    async def start(self) -> None:
        """Start the producer."""
        await self._producer.start()

    async def stop(self) -> None:
        """Stop the producer (records still in flight are flushed first by aiokafka)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._producer.stop()

    def raise_if_failed(self) -> None:
        """Raise the first failure no retry could fix (called from the agent loops)."""
        if self._failure is not None:
            raise BrokerError(f"produce failed: {self._failure!r}")

    async def send(self, topic: str, key: bytes | None, value: bytes,
                   on_ack: Callable[[], None] | None = None) -> None:
        """Produce one record; call ``on_ack`` once the broker has it.

        Waits only while the producer's buffer is full (backpressure).

        Raises:
            BadInput: The record exceeds ``max_record_bytes`` (no retry can fix it).
        """
        if len(value) + (len(key) if key else 0) + RECORD_OVERHEAD > self.max_record_bytes:
            raise BadInput(f"would be a {topic} record of {len(value)} bytes, over the "
                           f"{self.max_record_bytes}-byte limit")
        self._in_flight += 1
        self._serial += 1
        serial = self._serial
        self._unacked[serial] = (topic, key, value)
        self._idle.clear()
        await self._attempt(serial, topic, key, value, on_ack, 0)

    async def send_record(self, topic: str, key: bytes | None, record: BaseModel,
                          on_ack: Callable[[], None] | None = None) -> None:
        """Encode and produce one wire record (see :meth:`send`)."""
        await self.send(topic, key, encode(record), on_ack)

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every record handed over is acknowledged; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _attempt(self, serial: int, topic: str, key: bytes | None, value: bytes,
                       on_ack: Callable[[], None] | None, tries: int) -> None:
        try:
            future = await self._producer.send(topic, value, key=key)
        except SEND_ERRORS as error:
            self._failed(serial, topic, key, value, on_ack, tries, error)
            return

        def delivered(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled():
                self._failed(serial, topic, key, value, on_ack, tries,
                             asyncio.CancelledError())
                return
            error = fut.exception()
            if error is not None:
                self._failed(serial, topic, key, value, on_ack, tries, error)
                return
            if self._retrying and tries:
                self._retrying -= 1
            self.outage.progress()
            self._done(serial)
            if on_ack is not None:
                on_ack()

        future.add_done_callback(delivered)

    def _failed(self, serial: int, topic: str, key: bytes | None, value: bytes,
                on_ack: Callable[[], None] | None, tries: int, error: BaseException) -> None:
        if not retriable(error):
            if self._failure is None:
                self._failure = error
            log.error("produce to %s failed and cannot be retried: %r; its inputs stay "
                      "unacknowledged", topic, error, extra={"topic": topic})
            self._done(serial)
            return
        if tries == 0:
            self._retrying += 1
        self.outage.trouble(f"cannot produce to {topic}: {_short(error)}")
        self.outage.check(self._retrying)
        delay = min(self._max_backoff_s, 0.1 * 2 ** min(tries, 8))
        task = asyncio.get_running_loop().create_task(
            self._retry(delay, serial, topic, key, value, on_ack, tries + 1))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retry(self, delay: float, serial: int, topic: str, key: bytes | None,
                     value: bytes, on_ack: Callable[[], None] | None, tries: int) -> None:
        await asyncio.sleep(delay)
        await self._attempt(serial, topic, key, value, on_ack, tries)

    def _done(self, serial: int) -> None:
        self._unacked.pop(serial, None)
        self._in_flight -= 1
        if self._in_flight <= 0:
            self._in_flight = 0
            self._idle.set()


def _short(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:200]


async def send_dead_letter(outbox: Outbox, *, stage: str, topic: str, partition: int,
                           offset: int, key: bytes | None, value: bytes | None,
                           error: BadInput, on_ack: Callable[[], None]) -> None:
    """Send one input record's dead letter (with the reason); ``on_ack`` on delivery."""
    record = dead_letter_record(stage=stage, topic=topic, partition=partition, offset=offset,
                                error=error, key=key, value=value,
                                max_record_bytes=outbox.max_record_bytes)
    log.info("dead-lettered a record: %s", record.reason, extra={
        "stage": stage, "topic": topic, "partition": partition, "offset": offset})
    outbox.on_dead_letter(stage, record.error)
    await outbox.send_record(catalog.DEADLETTER, key[:MAX_KEY_BYTES] if key else None, record,
                             on_ack)
