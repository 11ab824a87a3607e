"""Watching the pipeline's output topics into a ledger (the demo, the integration tests).

The observer reads ``aligned.windows``, ``late``, ``deadletter`` and the response topic
from their ends at :meth:`Observer.start` (manual assignment: no group, no rebalance wait),
keeps only the streams it is told about, and answers whether every published token is
accounted for and every window answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from itertools import islice

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.reader import TopicReader
from lockstep.observe.ledger import Ledger
from lockstep.producer.delivery import PublishReport
from lockstep.topics import catalog

log = logging.getLogger(__name__)


class Observer:
    """Consumes the output topics into a :class:`Ledger`."""

    def __init__(self, kafka: KafkaSettings, keep: Callable[[str], bool],
                 response_topic: str = catalog.RESPONSES) -> None:
        self.ledger = Ledger()
        self._kafka = kafka
        self._keep = keep
        self._topics = [catalog.ALIGNED, catalog.LATE, catalog.DEADLETTER, response_topic]
        self._response_topic = response_topic
        self._reader: TopicReader | None = None
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    async def start(self, timeout_s: float = 15.0) -> None:
        """Assign every partition of the watched topics at its current end and start reading.

        Raises:
            BrokerError: A watched topic does not exist after ``timeout_s``.
        """
        self._reader = reader = TopicReader(
            self._kafka, self._topics, what="observer", connect_timeout_s=timeout_s,
            # Bookkeeping, not the pipeline: no need to poll a holding broker every few ms.
            fetch_wait_ms=max(self._kafka.fetch_max_wait_ms, 50))
        await reader.start()
        try:
            await reader.seek_to_end()  # resolved now, before anything is produced
        except BaseException:
            await reader.stop()
            raise
        self._task = asyncio.create_task(self._run(reader), name="lockstep.observer")

    async def stop(self) -> None:
        """Stop reading."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._reader is not None:
            await self._reader.stop()

    async def _run(self, reader: TopicReader) -> None:
        while True:
            batches = await reader.fetch(timeout_ms=200, max_records=2000)
            for tp, records in batches.items():
                for record in records:
                    self._add(tp.topic, record.key, record.value)
            if batches:
                self.changed.set()

    def _add(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        stream_id = key.decode(errors="replace") if key else ""
        if self._keep(stream_id) and self.ledger.add(value) is None:
            log.warning("undecodable record on %s", topic)


async def drain(observer: Observer, published: PublishReport, timeout_s: float) -> bool:
    """Wait until the ledger closes: every token settled, every window answered."""
    deadline = time.monotonic() + timeout_s
    ledger = observer.ledger
    # Which published tokens are still unaccounted for, worked out a slice at a time: at
    # once, for tens of thousands of tokens, it held the roles' event loop ~0.1 s.
    ledger.expect(())
    keys = iter(published.keys)
    while chunk := list(islice(keys, _EXPECT_SLICE)):
        ledger.expect_more(chunk)
        await asyncio.sleep(0)
    while time.monotonic() < deadline:
        if (not ledger.unaccounted_count and not ledger.unanswered()
                and len(ledger.dead_letters) >= published.bad_records):
            return True
        await asyncio.sleep(0.1)  # the check is O(windows): not on every record read
    return False


#: Published tokens checked against the ledger between two turns of the event loop.
_EXPECT_SLICE = 2000
