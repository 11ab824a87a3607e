"""Producing from agents with acknowledgement chaining, and dead-letter records.

An input event is acknowledged to Faust (and so becomes committable) only once every
record produced from it has been acknowledged by the broker. A failed produce leaves the
event unacknowledged — its offset is never committed past — and fails the agent, which
the worker's supervisor restarts; the record is then replayed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import faust
from faust.types import EventT
from pydantic import BaseModel

from lockstep.errors import BadInput, BrokerError
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.schemas import DeadLetter

log = logging.getLogger(__name__)


def wall_us() -> int:
    """The wall clock in integer microseconds since the Unix epoch."""
    return time.time_ns() // 1000


class Outbox:
    """Sends wire records through the app's producer and acknowledges events on delivery."""

    def __init__(self, app: faust.App, stage: str) -> None:
        self._app = app
        self.stage = stage
        self._failure: BaseException | None = None

    def raise_if_failed(self) -> None:
        """Raise the first produce failure, if any (called from the agent loop)."""
        if self._failure is not None:
            raise BrokerError(f"{self.stage}: produce failed: {self._failure!r}")

    async def send(
        self,
        topic: str,
        key: bytes | None,
        record: BaseModel,
        *,
        ack: Iterable[EventT[bytes]] = (),
        on_delivered: Callable[[], None] | None = None,
    ) -> asyncio.Future[Any]:
        """Produce one record; acknowledge ``ack`` events once the broker has it.

        Returns:
            The delivery future (already carrying the acknowledgement callback).
        """
        events = list(ack)
        future = cast(asyncio.Future[Any], await self._app.producer.send(
            topic, key, encode(record), None, None, None))

        def delivered(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled() or fut.exception() is not None:
                error = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
                if self._failure is None:
                    self._failure = error
                log.error("produce failed, events left unacknowledged",
                          extra={"stage": self.stage, "topic": topic, "error": repr(error)})
                return
            for event in events:
                event.ack()
            if on_delivered is not None:
                on_delivered()

        future.add_done_callback(delivered)
        return future

    async def dead_letter(self, event: EventT[bytes], error: BadInput) -> asyncio.Future[Any]:
        """Send an event's record to the dead-letter topic with the reason; ack on delivery."""
        message = event.message
        record = DeadLetter(
            stage=self.stage, topic=message.topic, partition=message.partition,
            offset=message.offset, reason=error.reason, error=type(error).__name__,
            key=_as_bytes(message.key), value=_as_bytes(message.value), at_us=wall_us(),
        )
        log.warning("dead-lettered a record: %s", error.reason, extra={
            "stage": self.stage, "topic": message.topic, "partition": message.partition,
            "offset": message.offset})
        return await self.send(catalog.DEADLETTER, _as_bytes(message.key), record, ack=[event])


def _as_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()
