"""Watching the pipeline's output topics (the demo's ledger, ``lockstep subscribe``).

The observer reads ``aligned.windows``, ``late``, ``deadletter`` and the response topic
from their ends at :meth:`Observer.start` (manual assignment: no group, no rebalance wait),
keeps only the streams it is told about, and answers whether every published token is
accounted for and every window answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.errors import BadInput
from lockstep.streams.aligner import TokenKey
from lockstep.streams.settings import KafkaSettings
from lockstep.topics import catalog
from lockstep.topics.admin import admin_client, wait_for_partitions
from lockstep.topics.codec import decode
from lockstep.topics.schemas import DeadLetter, LateToken, Response, Window

log = logging.getLogger(__name__)


@dataclass
class Ledger:
    """Where tokens and windows ended up, deduplicated on their idempotency keys."""

    windows: dict[tuple[str, int], Window] = field(default_factory=dict)
    responses: dict[tuple[str, int], Response] = field(default_factory=dict)
    in_windows: set[TokenKey] = field(default_factory=set)
    late: set[TokenKey] = field(default_factory=set)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    duplicates: Counter[str] = field(default_factory=Counter)

    def unaccounted(self, published: set[TokenKey]) -> set[TokenKey]:
        """Published tokens in no window and no late record."""
        return published - self.in_windows - self.late

    def unanswered(self) -> set[tuple[str, int]]:
        """Windows with no response."""
        return set(self.windows) - set(self.responses)


class Observer:
    """Consumes the output topics into a :class:`Ledger`."""

    def __init__(self, kafka: KafkaSettings, keep: Callable[[str], bool],
                 response_topic: str = catalog.RESPONSES) -> None:
        self.ledger = Ledger()
        self._kafka = kafka
        self._keep = keep
        self._topics = [catalog.ALIGNED, catalog.LATE, catalog.DEADLETTER, response_topic]
        self._response_topic = response_topic
        self._consumer = AIOKafkaConsumer(
            **kafka.aiokafka_options(), enable_auto_commit=False, group_id=None,
            fetch_max_wait_ms=kafka.fetch_max_wait_ms,
            max_partition_fetch_bytes=kafka.max_record_bytes)
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    async def start(self, timeout_s: float = 15.0) -> None:
        """Assign every partition of the watched topics at its current end and start reading.

        Raises:
            BrokerError: A watched topic does not exist after ``timeout_s``.
        """
        consumer = self._consumer
        await consumer.start()
        try:
            partitions = await self._partitions(timeout_s)
            consumer.assign(partitions)
            await consumer.seek_to_end(*partitions)
            for tp in partitions:
                await consumer.position(tp)  # resolve the end now, before anything is produced
        except BaseException:
            await consumer.stop()
            raise
        self._task = asyncio.create_task(self._run(), name="lockstep.observer")

    async def _partitions(self, timeout_s: float) -> list[TopicPartition]:
        admin = admin_client(self._kafka.confluent_config())
        counts = await asyncio.to_thread(wait_for_partitions, admin, self._topics, timeout_s)
        return [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]

    async def stop(self) -> None:
        """Stop reading."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()

    async def _run(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=200, max_records=2000)
            for tp, records in batches.items():
                for record in records:
                    self._add(tp.topic, record.key, record.value)
            if batches:
                self.changed.set()

    def _add(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        stream_id = key.decode(errors="replace") if key else ""
        if not self._keep(stream_id):
            return
        try:
            record = decode(value)
        except BadInput as error:
            log.warning("undecodable record on %s: %s", topic, error.reason)
            return
        ledger = self.ledger
        if isinstance(record, Window):
            wkey = (record.stream_id, record.window_seq)
            if wkey in ledger.windows:
                ledger.duplicates["window"] += 1
            ledger.windows[wkey] = record
            for modality, seqs in record.members.items():
                ledger.in_windows.update(TokenKey(record.stream_id, modality, s) for s in seqs)
        elif isinstance(record, Response):
            rkey = (record.stream_id, record.window_seq)
            if rkey in ledger.responses:
                ledger.duplicates["response"] += 1
            ledger.responses[rkey] = record
        elif isinstance(record, LateToken):
            ledger.late.add(TokenKey(record.stream_id, record.modality, record.seq))
        elif isinstance(record, DeadLetter):
            ledger.dead_letters.append(record)
