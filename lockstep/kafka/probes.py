"""What the client and the broker allow on this machine, with nothing of Lockstep's around it.

- :class:`HopProbe`: one hop timed. A producer sends records at a steady rate with their
  send time as the record timestamp; a reader at the log end takes each one's hop (receive
  time minus that timestamp). ``lockstep bench broker`` times it on an empty topic and
  after the log has grown.
- :func:`run_hop` and :func:`run_source` (each the body of a child process) and
  :func:`read_arrivals`: a raw consume→produce pass-through. The source writes records as
  fast as it can; each hop consumes one topic in a group and produces every record
  unchanged to the next, committing per batch; the sink notes when they arrive. Nothing
  is decoded. Each runs on either client (``aiokafka``, the roles' today, or
  ``librdkafka`` through confluent-kafka: batch consume, idempotent producer). ``lockstep
  bench pipeline`` compares the pipeline's throughput with both.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaException, Producer

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.clients import BATCH_BYTES, IN_FLIGHT_BYTES, producer
from lockstep.kafka.producer import producer_config
from lockstep.kafka.reader import TopicReader
from lockstep.kafka.retry import DELIVERY_TIMEOUT_S

#: The pass-through producers' linger, ms (the roles' was 2 ms until 6 December; at 0 the
#: pass-through moved 6,300-10,400 records/s against 8,600-16,700 at 2 ms, alternating runs
#: on Apache Kafka on the 2-core development machine).
PASSTHROUGH_LINGER_MS = 2.0
#: The clients a pass-through can run on.
PassthroughClient = Literal["aiokafka", "librdkafka"]
#: Records a librdkafka hop takes from one ``consume`` call.
_RD_BATCH = 1000


@dataclass(frozen=True)
class HopTimes:
    """One steady phase of a :class:`HopProbe`: what was sent, and each hop read."""

    sent: int
    hops_ms: list[float]
    wall_s: float


class HopProbe:
    """One topic's hop, timed from a producer to a reader at the log end.

    Use as an async context manager. The producer asks the leader alone to acknowledge
    (``acks=1``), lingers 1 ms and keeps the client's default 16 kB batches: the hop, not
    the replication, is timed.
    """

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self._producer = producer(kafka, linger_ms=1, acks=1, batch_bytes=16_384,
                                  request_timeout_ms=40_000)
        self._reader = TopicReader(kafka, [topic], what=f"timing {topic}")

    async def __aenter__(self) -> Self:
        await self._producer.start()
        try:
            await self._reader.start()
            await self._reader.seek_to_end()
        except BaseException:
            await self._producer.stop()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        try:
            await self._reader.stop()
        finally:
            await self._producer.stop()

    async def steady(self, records: Iterator[tuple[bytes, bytes]], rate: int,
                     seconds: float, drain_s: float = 5.0) -> HopTimes:
        """Send ``rate`` records a second for ``seconds``; the hop of every record read.

        Records still unread ``drain_s`` after the last send are not timed.
        """
        hops_ms: list[float] = []
        sent = 0
        stop, drained = asyncio.Event(), asyncio.Event()
        want = -1  # how many were sent, once sending is over
        # Record timestamps are whole milliseconds: compare on the same scale.
        since_ms = int(time.time() * 1000)

        async def read() -> None:
            while not stop.is_set():
                got = await self._reader.fetch(timeout_ms=100, max_records=100_000)
                now_ms = time.time() * 1000
                for batch in got.values():  # (a record written before the phase is not timed)
                    hops_ms.extend(now_ms - r.timestamp for r in batch if r.timestamp >= since_ms)
                if 0 <= want <= len(hops_ms):
                    drained.set()

        reader = asyncio.ensure_future(read())
        began = time.monotonic()
        tick = 0.01
        per_tick = rate * tick
        try:
            while (elapsed := time.monotonic() - began) < seconds:
                due = int(per_tick * (elapsed / tick + 1))
                while sent < due:
                    key, value = next(records)
                    await self._producer.send(self.topic, value, key=key,
                                              timestamp_ms=int(time.time() * 1000))
                    sent += 1
                await asyncio.sleep(tick)
            await self._producer.flush()
            want = sent
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), drain_s)
        finally:
            stop.set()
            await reader
        return HopTimes(sent, hops_ms, time.monotonic() - began)

    async def fill(self, records: Iterable[tuple[bytes, bytes]]) -> None:
        """Write ``records`` as fast as the client allows, unread; the reader then skips them.

        Returns once every one is acknowledged.
        """
        for tp in self._reader.partitions:
            self._reader.pause(tp)
        for key, value in records:
            await self._producer.send(self.topic, value, key=key)
        await self._producer.flush()
        await self._reader.seek_to_end()
        self._reader.resume()


def _group_consumer(kafka: KafkaSettings, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        **kafka.aiokafka_options(), group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=kafka.fetch_max_wait_ms,
        max_partition_fetch_bytes=kafka.max_record_bytes,
        fetch_max_bytes=max(kafka.max_record_bytes, 52_428_800),
        session_timeout_ms=kafka.session_timeout_ms,
        heartbeat_interval_ms=max(100, kafka.session_timeout_ms // 3))


def _passthrough_producer(kafka: KafkaSettings) -> AIOKafkaProducer:
    return producer(kafka, linger_ms=PASSTHROUGH_LINGER_MS)


async def _hop(kafka: KafkaSettings, source: str, target: str, group: str,
               total: int, timeout_s: float) -> None:
    consumer, out = _group_consumer(kafka, group), _passthrough_producer(kafka)
    await consumer.start()
    await out.start()
    moved = 0
    deadline = time.monotonic() + timeout_s
    try:
        consumer.subscribe([source])
        while moved < total and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=100, max_records=1000)
            sends = [await out.send(target, r.value, key=r.key)
                     for records in batches.values() for r in records]
            if sends:
                await asyncio.gather(*sends)
                await consumer.commit()
                moved += len(sends)
    finally:
        await out.stop()
        await consumer.stop()


async def _source(kafka: KafkaSettings, topic: str, total: int,
                  payloads: Sequence[bytes]) -> None:
    out = _passthrough_producer(kafka)
    await out.start()
    try:
        values = itertools.cycle(payloads)
        pending = []
        for i in range(total):
            pending.append(await out.send(topic, next(values), key=b"raw-%d" % (i % 16)))
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await out.stop()


def _rd_producer(kafka: KafkaSettings, idempotent: bool) -> Producer:
    return Producer(producer_config(
        kafka, compression="none", linger_ms=PASSTHROUGH_LINGER_MS, batch_bytes=BATCH_BYTES,
        max_in_flight_bytes=IN_FLIGHT_BYTES, idempotence=idempotent,
        delivery_timeout_s=DELIVERY_TIMEOUT_S))


def _rd_produce(out: Producer, topic: str, value: bytes | None, key: bytes | None) -> None:
    while True:
        try:
            out.produce(topic, value, key)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            out.poll(0.05)


def _rd_hop(kafka: KafkaSettings, source: str, target: str, group: str, total: int,
            timeout_s: float, idempotent: bool) -> None:
    consumer = Consumer({
        **kafka.confluent_config(), "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": kafka.fetch_max_wait_ms,
        "session.timeout.ms": kafka.session_timeout_ms})
    out = _rd_producer(kafka, idempotent)
    moved = 0
    deadline = time.monotonic() + timeout_s
    try:
        consumer.subscribe([source])
        while moved < total and time.monotonic() < deadline:
            records = [r for r in consumer.consume(_RD_BATCH, 0.1) if r.error() is None]
            if not records:
                continue
            for r in records:
                _rd_produce(out, target, r.value(), r.key())
            if out.flush(timeout_s) > 0:
                raise KafkaException(f"pass-through hop: {len(out)} records not delivered")
            consumer.commit(asynchronous=False)
            moved += len(records)
    finally:
        out.flush(10.0)
        consumer.close()


def _rd_source(kafka: KafkaSettings, topic: str, total: int, payloads: Sequence[bytes],
               idempotent: bool) -> None:
    out = _rd_producer(kafka, idempotent)
    values = itertools.cycle(payloads)
    for i in range(total):
        _rd_produce(out, topic, next(values), b"raw-%d" % (i % 16))
        if i % 1000 == 999:
            out.poll(0)
    if out.flush(120.0) > 0:
        raise KafkaException(f"pass-through source: {len(out)} records not delivered")


def run_hop(kafka: KafkaSettings, source: str, target: str, group: str, total: int,
            timeout_s: float, client: PassthroughClient = "aiokafka",
            idempotent: bool = True) -> None:
    """A pass-through hop (a child process's body): ``source`` → ``target``, ``total`` records.

    ``idempotent`` applies to librdkafka (the embedded broker refuses idempotent producers).
    """
    if client == "librdkafka":
        _rd_hop(kafka, source, target, group, total, timeout_s, idempotent)
    else:
        asyncio.run(_hop(kafka, source, target, group, total, timeout_s))


def run_source(kafka: KafkaSettings, topic: str, total: int, payloads: Sequence[bytes],
               client: PassthroughClient = "aiokafka", idempotent: bool = True) -> None:
    """The pass-through's source (a child process's body): ``total`` records of ``payloads``."""
    if client == "librdkafka":
        _rd_source(kafka, topic, total, payloads, idempotent)
    else:
        asyncio.run(_source(kafka, topic, total, payloads))


async def read_arrivals(kafka: KafkaSettings, topic: str, total: int,
                        timeout_s: float) -> list[tuple[float, int]]:
    """Read ``topic`` from its beginning: (monotonic time, records so far) per batch.

    Ends once ``total`` records arrived, or after ``timeout_s``.
    """
    arrivals: list[tuple[float, int]] = []
    seen = 0
    deadline = time.monotonic() + timeout_s
    async with TopicReader(kafka, [topic], what="pass-through sink") as reader:
        await reader.seek_to_beginning()
        while seen < total and time.monotonic() < deadline:
            batches = await reader.fetch(timeout_ms=100, max_records=5000)
            n = sum(len(records) for records in batches.values())
            if n:
                seen += n
                arrivals.append((time.monotonic(), seen))
    return arrivals
