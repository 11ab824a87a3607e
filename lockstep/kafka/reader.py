"""Reading topics without a consumer group: the one reader of every read-back and follower.

A :class:`TopicReader` assigns every partition of its topics by hand (no group, so no
rebalance wait and no committed offsets), starts where it is told (the beginning, the end,
a produce time or given offsets) and then either follows the topics or reads them up to
the ends they had (:meth:`TopicReader.read_until`). The roles' read-back on takeover, the
SLO listener, the demo's ledger, ``lockstep inspect``, ``validate`` and ``subscribe``, the
chaos read-back and the Python API all read through it; :func:`read_records` yields a
topic's records decoded (:class:`Read`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiokafka import AIOKafkaConsumer
from pydantic import BaseModel

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BadInput, BrokerError
from lockstep.kafka.types import Record, TopicPartition
from lockstep.kafka.wait import cluster_metadata, topic_partitions, wait_for_broker
from lockstep.topics.codec import decode

log = logging.getLogger(__name__)

#: aiokafka's own limit on a fetch response; raised only for records larger than it.
_FETCH_MAX_BYTES = 52_428_800


class TopicReader:
    """Every partition of some topics, read without a consumer group.

    Lifecycle: ``async with TopicReader(...) as reader`` (or :meth:`start` …
    :meth:`stop` in a ``finally``). After the start every partition is assigned at the
    client's default position; position it with one of the ``seek`` methods.

    Args:
        kafka: Connection settings.
        topics: Topics to read (each must exist).
        what: What is reading, for log lines and errors.
        fetch_wait_ms: How long a fetch may wait for records (default: the settings').
        connect_timeout_s: Fail the start this soon when the cluster cannot be reached
            (None: wait for it as long as it takes).
        topic_timeout_s: Fail the start when a topic does not exist this long (default:
            ``connect_timeout_s``, or 15 s).
        skip_missing: Read the topics that exist and skip the others, instead of waiting
            for them.
    """

    def __init__(self, kafka: KafkaSettings, topics: Sequence[str], *, what: str,
                 fetch_wait_ms: int | None = None, connect_timeout_s: float | None = 10.0,
                 topic_timeout_s: float | None = None, skip_missing: bool = False) -> None:
        self.kafka = kafka
        self.topics = list(dict.fromkeys(topics))
        self.what = what
        self.connect_timeout_s = connect_timeout_s
        self.topic_timeout_s = (topic_timeout_s if topic_timeout_s is not None
                                else connect_timeout_s if connect_timeout_s is not None
                                else 15.0)
        self.skip_missing = skip_missing
        #: Every partition of :attr:`topics`, assigned at the start.
        self.partitions: list[TopicPartition] = []
        self._consumer = AIOKafkaConsumer(
            **kafka.aiokafka_options(), group_id=None, enable_auto_commit=False,
            fetch_max_wait_ms=kafka.fetch_max_wait_ms if fetch_wait_ms is None else fetch_wait_ms,
            max_partition_fetch_bytes=kafka.max_record_bytes,
            fetch_max_bytes=max(kafka.max_record_bytes, _FETCH_MAX_BYTES))

    async def start(self) -> None:
        """Connect (waiting for the cluster) and assign every partition of the topics.

        Raises:
            BrokerError: The cluster was not reached within ``connect_timeout_s``, or a
                topic did not exist within ``topic_timeout_s``.
        """
        consumer = self._consumer
        try:
            await wait_for_broker(consumer.start, self.kafka, what=self.what,
                                  timeout_s=self.connect_timeout_s)
            if self.skip_missing:
                cluster = await cluster_metadata(consumer)
                self.partitions = [TopicPartition(t, p) for t in self.topics
                                   for p in sorted(cluster.partitions_for_topic(t) or ())]
            else:
                self.partitions = [
                    tp for topic in self.topics
                    for tp in await topic_partitions(consumer, topic, self.topic_timeout_s)]
            consumer.assign(self.partitions)
        except BaseException:
            await consumer.stop()
            raise

    async def stop(self) -> None:
        """Disconnect."""
        await self._consumer.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.stop()

    async def seek_to_end(self) -> None:
        """Start at the end: only records produced from now on are read.

        The end is resolved now, so a record produced right after this returns is read.
        """
        await self._consumer.seek_to_end(*self.partitions)
        for tp in self.partitions:
            await self._consumer.position(tp)

    async def seek_to_beginning(self) -> None:
        """Start at the oldest record each partition retains."""
        await self._consumer.seek_to_beginning(*self.partitions)

    async def seek_to_time(self, since_ms: int) -> None:
        """Start at the first record produced at or after ``since_ms`` (epoch ms).

        A partition with none starts at its end.
        """
        found = await self._consumer.offsets_for_times({tp: since_ms for tp in self.partitions})
        for tp in self.partitions:
            at = found.get(tp)
            if at is None:
                await self._consumer.seek_to_end(tp)
            else:
                self._consumer.seek(tp, at.offset)

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Start these partitions at these offsets; the others are paused."""
        for tp in self.partitions:
            if tp in offsets:
                self._consumer.seek(tp, offsets[tp])
            else:
                self._consumer.pause(tp)

    async def offsets_for_time(self, since_ms: int) -> dict[TopicPartition, int | None]:
        """Per partition, the offset of the first record produced at or after ``since_ms``."""
        found = await self._consumer.offsets_for_times({tp: since_ms for tp in self.partitions})
        return {tp: (None if found.get(tp) is None else found[tp].offset)
                for tp in self.partitions}

    async def end_offsets(self) -> dict[TopicPartition, int]:
        """The end (high watermark) of every partition, now."""
        return dict(await self._consumer.end_offsets(self.partitions))

    async def beginning_offsets(self) -> dict[TopicPartition, int]:
        """The oldest offset every partition retains, now."""
        return dict(await self._consumer.beginning_offsets(self.partitions))

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record read from ``tp``."""
        return int(await self._consumer.position(tp))

    def pause(self, tp: TopicPartition) -> None:
        """Fetch nothing more from ``tp``."""
        self._consumer.pause(tp)

    def resume(self) -> None:
        """Fetch from every partition again."""
        self._consumer.resume(*self.partitions)

    async def fetch(self, *, timeout_ms: int = 200, max_records: int = 500,
                    partitions: Collection[TopicPartition] = ()
                    ) -> dict[TopicPartition, list[Record]]:
        """The records that arrive within ``timeout_ms``, per partition, in offset order.

        Args:
            timeout_ms: Longest wait when no record is there yet.
            max_records: Most records returned at once.
            partitions: Only from these (default: every one not paused).
        """
        return dict(await self._consumer.getmany(*partitions, timeout_ms=timeout_ms,
                                                 max_records=max_records))

    async def read_until(self, ends: Mapping[TopicPartition, int], *, timeout_ms: int = 500,
                         max_records: int = 5000, timeout_s: float | None = None
                         ) -> AsyncIterator[list[Record]]:
        """Batches of records, one partition each, until ``ends`` are reached.

        Every partition of ``ends`` is read up to its offset there. A batch may hold records
        at or past its partition's end, fetched with the last ones before it: a reader that
        goes on later keeps them, a one-time read drops them.

        Raises:
            BrokerError: The ends were not reached within ``timeout_s`` (None: no limit).
        """
        todo = {tp: end for tp, end in ends.items() if await self.position(tp) < end}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while todo:
            if deadline is not None and time.monotonic() > deadline:
                raise BrokerError(f"{self.what}: {len(todo)} partitions did not reach their "
                                  f"end within {timeout_s:.0f} s")
            batches = await self.fetch(timeout_ms=timeout_ms, max_records=max_records,
                                       partitions=list(todo))
            for records in batches.values():
                if records:
                    yield records
            for tp in list(todo):
                if await self.position(tp) >= todo[tp]:
                    del todo[tp]


#: Without --follow, reading ends once nothing has come for this long.
IDLE_S = 1.0


@dataclass(frozen=True)
class Read:
    """One record read back: where it was, and what it decodes to (or why it does not)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    record: BaseModel | None
    error: str | None


async def read_records(kafka: KafkaSettings, topic: str, *, since_ms: int | None = None,
                       from_end: bool = False, follow: bool = False,
                       stream_ids: Collection[str] = (),
                       connect_timeout_s: float = 10.0) -> AsyncIterator[Read]:
    """Records of ``topic``, decoded, optionally of some streams only.

    Args:
        kafka: Connection settings.
        topic: The topic.
        since_ms: Start at records produced at or after this (epoch ms); None: the
            beginning (or the end with ``from_end``).
        from_end: Start at the end (only new records; implies ``follow``).
        follow: Keep reading new records; else stop at the end as it was at the start.
        stream_ids: Only records keyed by one of these.
        connect_timeout_s: Fail this soon when the cluster cannot be reached.

    Raises:
        BrokerError: The cluster cannot be reached, or the topic does not exist.
    """
    wanted = {s.encode() for s in stream_ids}
    async with TopicReader(kafka, [topic], what=f"reading {topic}",
                           connect_timeout_s=connect_timeout_s) as reader:
        started_ms = time.time_ns() // 1_000_000
        if from_end:
            await reader.seek_to_end()
        elif since_ms is None:
            await reader.seek_to_beginning()
        else:
            await reader.seek_to_time(since_ms)
        follow = follow or from_end
        todo = set(reader.partitions)
        idle_since = time.monotonic()
        # Without --follow: until every partition brings records produced after the start,
        # or nothing comes for IDLE_S (end offsets are not used: the embedded broker's
        # count produce batches, not records).
        while todo and (follow or time.monotonic() - idle_since < IDLE_S):
            batches = await reader.fetch(timeout_ms=200, max_records=500, partitions=todo)
            if batches:
                idle_since = time.monotonic()
            for tp, records in batches.items():
                for r in records:
                    if not follow and r.timestamp > started_ms:
                        todo.discard(tp)  # produced after the command started: the end
                        break
                    if not wanted or r.key in wanted:
                        yield _decoded(tp, r.offset, r.timestamp, r.key, r.value)


def _decoded(tp: TopicPartition, offset: int, timestamp_ms: int, key: bytes | None,
             value: bytes | None) -> Read:
    try:
        return Read(tp.topic, tp.partition, offset, timestamp_ms, key, decode(value), None)
    except BadInput as error:
        return Read(tp.topic, tp.partition, offset, timestamp_ms, key, None, error.reason)

