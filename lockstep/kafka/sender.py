"""A sender that retries: ``publish_synthetic``'s producer path.

:class:`RetryingSender` wraps an asyncio producer (aiokafka's, or librdkafka's as
``kafka.producer_client`` says): a send that fails with a retriable
error (broker restart, leader change, timeout) is sent again with backoff until its
delivery timeout; every record (:class:`Outgoing`) ends in exactly one ``on_ack`` or
``on_fail`` call. The outage it meets is told to an :class:`~lockstep.kafka.retry.OutageLog`.

A re-sent record lands after records sent later (at-least-once, not in order): the
aligner places tokens by capture time, and what arrives past a window's deadline is late.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError
from lockstep.kafka.clients import RecordProducer, asyncio_producer
from lockstep.kafka.retry import DELIVERY_TIMEOUT_S, SEND_ERRORS, OutageLog, retriable
from lockstep.topics.keys import TokenKey


@dataclass(eq=False)
class Outgoing:
    """One record on its way to the broker, with what to re-send and report."""

    topic: str
    value: bytes
    key: bytes
    #: The modality (``bad`` for an undecodable record) for the per-modality counts.
    label: str
    #: The token's key, or None for a record that is no token.
    token: TokenKey | None = None
    capture_us: int = 0
    attempts: int = 0
    deadline: float = field(default=0.0, repr=False)


class RetryingSender:
    """An asyncio producer that re-sends on retriable failures until the delivery timeout.

    Lifecycle: :meth:`start` (waits for the broker, with backoff, up to the delivery
    timeout), :meth:`send` …, :meth:`drain`, and :meth:`stop` in a ``finally``.
    """

    def __init__(self, kafka: KafkaSettings, *, on_ack: Callable[[Outgoing], None],
                 on_fail: Callable[[Outgoing, str], None], outage: OutageLog,
                 delivery_timeout_s: float = DELIVERY_TIMEOUT_S,
                 backoff_s: tuple[float, float] = (0.2, 5.0)) -> None:
        """Configure the producer: all acks, 1 MB batches, ``kafka.linger_ms``.

        Args:
            kafka: Connection settings.
            on_ack: Called once for a record the broker acknowledged.
            on_fail: Called once, with the reason, for a record given up on.
            outage: Told about acknowledgements and trouble; checked every second.
            delivery_timeout_s: Time from a record's first send after which it is not
                sent again (the last attempt may run one request timeout longer).
            backoff_s: First and longest pause before a re-send (doubling in between).
        """
        self._kafka = kafka
        self._on_ack = on_ack
        self._on_fail = on_fail
        self.outage = outage
        self.delivery_timeout_s = delivery_timeout_s
        # Each attempt expires after the request timeout: several attempts per delivery.
        self.request_timeout_s = max(1.0, min(30.0, delivery_timeout_s / 4))
        self._backoff = backoff_s
        self._producer: RecordProducer | None = None
        self._pending: set[Outgoing] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._last_deadline = 0.0
        #: Re-sends after a retriable failure.
        self.retries = 0

    @property
    def waiting(self) -> int:
        """Records sent and neither acknowledged nor given up on."""
        return len(self._pending)

    def _make(self) -> RecordProducer:
        return asyncio_producer(self._kafka, request_timeout_s=self.request_timeout_s)

    async def start(self) -> None:
        """Connect, retrying with backoff while the broker is unreachable.

        Raises:
            BrokerError: No broker answered within the delivery timeout, or the client
                failed for a reason no retry fixes.
        """
        deadline = time.monotonic() + self.delivery_timeout_s
        pause = self._backoff[0]
        while True:
            producer = self._make()
            try:
                await producer.start()
                break
            except SEND_ERRORS as exc:
                await producer.stop()
                if not retriable(exc):
                    raise BrokerError(f"cannot start the producer: {exc}") from None
                self.outage.trouble(f"cannot bootstrap: {exc}")
                self.outage.check(0, connecting=True)
                if time.monotonic() + pause > deadline:
                    raise BrokerError(
                        f"broker {self.outage.bootstrap} unreachable for "
                        f"{self.delivery_timeout_s:g} s; nothing was sent") from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, self._backoff[1])
        self._producer = producer
        self.outage.progress()
        self._tasks.add(asyncio.create_task(self._watch()))

    async def send(self, item: Outgoing) -> None:
        """Hand ``item`` to the producer; its outcome comes through the callbacks.

        Waits while the producer's buffer for the partition is full.
        """
        if self._producer is None:
            raise BrokerError("the sender is not started")
        if not item.attempts:
            item.deadline = self._last_deadline = time.monotonic() + self.delivery_timeout_s
            self._pending.add(item)
        item.attempts += 1
        try:
            future = await self._producer.send(item.topic, item.value, key=item.key)
        except SEND_ERRORS as exc:
            self._attempt_failed(item, exc)
            return
        future.add_done_callback(partial(self._done, item))

    async def drain(self) -> None:
        """Wait until every record is acknowledged or given up on.

        Bounded: a record still waiting one request timeout (plus 5 s) after its
        delivery deadline is given up on.
        """
        while self._pending:
            if time.monotonic() > self._last_deadline + self.request_timeout_s + 5.0:
                for item in list(self._pending):
                    self._settle(item, "no acknowledgement within the delivery timeout")
                break
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Stop re-sending and close the producer; what still waits has failed."""
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for item in list(self._pending):
            self._settle(item, "publishing stopped before it was acknowledged")
        if self._producer is not None:
            await self._producer.stop()

    def _done(self, item: Outgoing, future: asyncio.Future[Any]) -> None:
        if item not in self._pending:
            return
        if future.cancelled():
            self._settle(item, "cancelled: the producer stopped")
            return
        error = future.exception()
        if error is None:
            self._settle(item, None)
        else:
            self._attempt_failed(item, error)

    def _attempt_failed(self, item: Outgoing, error: BaseException) -> None:
        name, text = type(error).__name__, str(error)
        reason = text if name in text else f"{name}: {text}" if text else name
        if retriable(error) and not self._stopping:
            self.outage.trouble(reason)
            pause = min(self._backoff[1], self._backoff[0] * 2 ** (item.attempts - 1))
            if time.monotonic() + pause < item.deadline:
                self.retries += 1
                task = asyncio.create_task(self._resend(item, pause))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            reason = f"not acknowledged within {self.delivery_timeout_s:g} s ({reason})"
        self._settle(item, reason)

    async def _resend(self, item: Outgoing, pause: float) -> None:
        await asyncio.sleep(pause)
        await self.send(item)

    def _settle(self, item: Outgoing, failure: str | None) -> None:
        self._pending.discard(item)
        if failure is None:
            self.outage.progress()
            self._on_ack(item)
        else:
            self._on_fail(item, failure)

    async def _watch(self) -> None:
        while True:
            self.outage.check(self.waiting)
            await asyncio.sleep(1.0)
