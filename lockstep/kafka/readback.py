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

from aiokafka.partitioner import murmur2

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.reader import TopicReader
from lockstep.kafka.types import TopicPartition
from lockstep.streams.replay import Output

log = logging.getLogger(__name__)

#: Records produced this long before the first replayed input are read back too (the
#: clocks of the hosts that produced inputs and outputs may disagree by this much).
CLOCK_MARGIN_MS = 2_000
WHAT = "replay read-back"


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner gives ``key``."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


async def first_timestamp_ms(kafka: KafkaSettings,
                             positions: Mapping[TopicPartition, int]) -> int | None:
    """The earliest produce time (ms) of the records at ``positions`` (None: none exist)."""
    if not positions:
        return None
    topics = [tp.topic for tp in positions]
    async with TopicReader(kafka, topics, what=WHAT, connect_timeout_s=None) as reader:
        reader.seek(positions)
        earliest: int | None = None
        pending = set(positions)
        deadline = time.monotonic() + 30.0
        while pending and time.monotonic() < deadline:
            batches = await reader.fetch(timeout_ms=200, max_records=len(pending),
                                         partitions=pending)
            for tp, records in batches.items():
                if records:
                    ts = records[0].timestamp
                    earliest = ts if earliest is None else min(earliest, ts)
                    pending.discard(tp)
                    reader.pause(tp)
        return earliest


async def read_back(kafka: KafkaSettings, topics: Sequence[str], since_ms: int,
                    keep: Callable[[bytes | None], bool]) -> Iterable[Output]:
    """Every record of ``topics`` produced since ``since_ms`` whose key passes ``keep``."""
    out: list[Output] = []
    async with TopicReader(kafka, topics, what=WHAT, connect_timeout_s=None,
                           skip_missing=True) as reader:
        if not reader.partitions:
            return out
        ends = await reader.end_offsets()
        starts = await reader.offsets_for_time(since_ms)
        todo = {tp: at for tp, at in starts.items() if at is not None and at < ends[tp]}
        if not todo:
            return out
        reader.seek(todo)
        async for records in reader.read_until({tp: ends[tp] for tp in todo}):
            for record in records:
                tp = TopicPartition(record.topic, record.partition)
                if record.offset < ends[tp] and keep(record.key):
                    out.append(Output(record.topic, record.partition, record.key,
                                      record.value))
        log.info("read back %d records of %s since %d", len(out), ",".join(topics), since_ms)
        return out
