"""Reading back what a previous owner of some partitions produced (see lockstep.streams.replay).

When partitions are taken over with records after their committed offset, every output
topic of the role is read from shortly before the first of those records was produced to
its current end, without a consumer group; the records whose key belongs to the taken
partitions are handed to the agent, which fills its :class:`ReplayGuard`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.wait import cluster_metadata, wait_for_broker

log = logging.getLogger(__name__)

#: Records produced this long before the first replayed input are read back too (the
#: clocks of the hosts that produced inputs and outputs may disagree by this much).
CLOCK_MARGIN_MS = 2_000


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner gives ``key``."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class Output:
    """One record read back (or still being re-sent by this process's producer)."""

    topic: str
    partition: int  # -1: not written yet
    key: bytes | None
    value: bytes | None


def _consumer(kafka: KafkaSettings) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(**kafka.aiokafka_options(), group_id=None, enable_auto_commit=False,
                            fetch_max_wait_ms=kafka.fetch_max_wait_ms,
                            max_partition_fetch_bytes=kafka.max_record_bytes,
                            fetch_max_bytes=max(kafka.max_record_bytes, 52_428_800))


async def first_timestamp_ms(kafka: KafkaSettings,
                             positions: Mapping[TopicPartition, int]) -> int | None:
    """The earliest produce time (ms) of the records at ``positions`` (None: none exist)."""
    if not positions:
        return None
    consumer = _consumer(kafka)
    await wait_for_broker(consumer.start, kafka, what="replay read-back")
    try:
        consumer.assign(list(positions))
        for tp, offset in positions.items():
            consumer.seek(tp, offset)
        earliest: int | None = None
        pending = set(positions)
        deadline = time.monotonic() + 30.0
        while pending and time.monotonic() < deadline:
            batches = await consumer.getmany(*pending, timeout_ms=200, max_records=len(pending))
            for tp, records in batches.items():
                if records:
                    ts = records[0].timestamp
                    earliest = ts if earliest is None else min(earliest, ts)
                    pending.discard(tp)
                    consumer.pause(tp)
        return earliest
    finally:
        await consumer.stop()


async def read_back(kafka: KafkaSettings, topics: Sequence[str], since_ms: int,
                    keep: Callable[[bytes | None], bool]) -> Iterable[Output]:
    """Every record of ``topics`` produced since ``since_ms`` whose key passes ``keep``."""
    consumer = _consumer(kafka)
    await wait_for_broker(consumer.start, kafka, what="replay read-back")
    out: list[Output] = []
    try:
        cluster = await cluster_metadata(consumer)
        tps = [TopicPartition(t, p) for t in topics
               for p in sorted(cluster.partitions_for_topic(t) or ())]
        if not tps:
            return out
        ends = await consumer.end_offsets(tps)
        starts = await consumer.offsets_for_times({tp: since_ms for tp in tps})
        todo = {tp: ends[tp] for tp in tps
                if starts.get(tp) is not None and starts[tp].offset < ends[tp]}
        if not todo:
            return out
        consumer.assign(list(todo))
        for tp in todo:
            consumer.seek(tp, starts[tp].offset)
        while todo:
            batches = await consumer.getmany(*todo, timeout_ms=500, max_records=5000)
            for tp, records in batches.items():
                for record in records:
                    if record.offset < todo.get(tp, -1) and keep(record.key):
                        out.append(Output(tp.topic, tp.partition, record.key, record.value))
            for tp in list(todo):
                if await consumer.position(tp) >= todo[tp]:
                    del todo[tp]
                    consumer.pause(tp)
        log.info("read back %d records of %s since %d", len(out), ",".join(topics), since_ms)
        return out
    finally:
        await consumer.stop()
