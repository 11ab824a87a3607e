"""Delivery that is acknowledged, retried and reported, for both producer paths.

- :class:`OutageLog` says once per interval that the broker is unreachable and how many
  records wait, and once that it is back (not one line per record).
- :class:`RetryingSender` wraps an aiokafka producer: a send that fails with a retriable
  error (broker restart, leader change, timeout) is sent again with backoff until its
  delivery timeout; every record ends in exactly one ``on_ack`` or ``on_fail`` call.
- :class:`DeliveryStats` (the :class:`~lockstep.publisher.Publisher`'s) and
  :class:`PublishReport` (``publish_synthetic``'s) say what was sent, acknowledged and
  failed per modality; :func:`delivery_line` puts that on one line.

A re-sent record lands after records sent later (at-least-once, not in order): the
aligner places tokens by capture time, and what arrives past a window's deadline is late.
"""

from __future__ import annotations

import array
import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError

from lockstep.errors import BrokerError
from lockstep.ledger import TokenSet
from lockstep.streams.aligner import TokenKey
from lockstep.streams.settings import KafkaSettings
from lockstep.topics.schemas import Modality

log = logging.getLogger(__name__)

#: Default time a record may take from its first send to its acknowledgement.
DELIVERY_TIMEOUT_S = 120.0
#: Distinct delivery errors kept for a report.
MAX_ERRORS = 10


def delivery_line(sent: Mapping[str, int], acked: Mapping[str, int],
                  failed: Mapping[str, int]) -> str:
    """``tokens sent/acked/failed: video 720/700/20, audio …`` in modality order."""
    known = [m.value for m in Modality]
    order = known + sorted((set(sent) | set(acked) | set(failed)) - set(known))
    parts = [f"{m} {sent.get(m, 0):,}/{acked.get(m, 0):,}/{failed.get(m, 0):,}"
             for m in order if sent.get(m) or acked.get(m) or failed.get(m)]
    return f"tokens sent/acked/failed: {', '.join(parts) or 'none'}"


@dataclass(frozen=True)
class DeliveryStats:
    """What a :class:`Publisher` has sent and what the broker acknowledged."""

    sent: Mapping[str, int]
    acked: Mapping[str, int]
    failed: Mapping[str, int]
    bytes_sent: int
    #: The first distinct delivery errors, for the report.
    errors: tuple[str, ...]
    #: Tokens refused before sending, per modality, because align would dead-letter them
    #: (counted in ``sent`` and ``failed`` too).
    refused: Mapping[str, int] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        """Tokens sent but neither acknowledged nor failed yet."""
        return sum(self.sent.values()) - sum(self.acked.values()) - sum(self.failed.values())

    @property
    def ok(self) -> bool:
        """Everything sent was acknowledged."""
        return self.in_flight == 0 and not sum(self.failed.values())

    def line(self) -> str:
        """Sent/acked/failed per modality, on one line."""
        return delivery_line(self.sent, self.acked, self.failed)


@dataclass
class PublishReport:
    """What was published: the acknowledged tokens are the ledger's left-hand side."""

    #: Tokens the broker acknowledged: seqs per stream and modality, not an object each. A
    #: publisher keeps every one for the whole run; as key objects they made the cyclic
    #: collector's full passes long enough (~45 ms at 30 streams) to hold its sends.
    keys: TokenSet = field(default_factory=TokenSet)
    #: Acknowledged tokens per modality.
    by_modality: Counter[str] = field(default_factory=Counter)
    #: Undecodable records (``inject_bad``) acknowledged.
    bad_records: int = 0
    seconds: float = 0.0
    #: Tokens sent per modality (once each, however often re-sent).
    sent: Counter[str] = field(default_factory=Counter)
    #: Tokens not delivered, with the reason.
    failed: dict[TokenKey, str] = field(default_factory=dict)
    bad_records_failed: int = 0
    #: Re-sends after a retriable failure (a broker restart, a timeout).
    retries: int = 0
    #: The first distinct delivery errors.
    errors: list[str] = field(default_factory=list)
    #: Tokens sent per stream and modality; the first and last ``seq`` sent of each.
    by_stream: dict[str, Counter[str]] = field(default_factory=dict)
    seqs: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    bytes_sent: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its keys as arrays of seqs per (stream, modality).

        A report crosses processes (the demo's publisher runs in a child). As a set of
        key objects, tens of thousands of them took ~0.15 s to unpickle in one call that
        holds the interpreter: every coroutine of the receiving process stood still
        meanwhile. From arrays, the :class:`~lockstep.ledger.TokenSet` is rebuilt one
        set update per stream and modality.
        """
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["keys"] = {(stream_id, modality.value): array.array("q", sorted(seqs)).tobytes()
                         for stream_id, modality, seqs in self.keys.groups()}
        return (_unpickle_report, (state,))

    def count_sent(self, key: TokenKey, size: int) -> None:
        """One token of ``size`` bytes handed to the producer (once, however often re-sent)."""
        modality = key.modality.value
        self.sent[modality] += 1
        self.by_stream.setdefault(key.stream_id, Counter())[modality] += 1
        first = self.seqs.get((key.stream_id, modality), (key.seq, 0))[0]
        self.seqs[(key.stream_id, modality)] = (first, key.seq)
        self.bytes_sent += size

    def stats(self) -> DeliveryStats:
        """The delivery counts in the form :class:`Publisher` reports them."""
        return DeliveryStats(dict(self.sent), dict(self.by_modality),
                             dict(self.failed_by_modality), self.bytes_sent, tuple(self.errors))

    @property
    def failed_by_modality(self) -> Counter[str]:
        """Undelivered tokens per modality."""
        return Counter(key.modality.value for key in self.failed)

    @property
    def ok(self) -> bool:
        """Every token and record sent was acknowledged."""
        return (not self.failed and not self.bad_records_failed
                and sum(self.sent.values()) == len(self.keys))

    def line(self) -> str:
        """Sent/acked/failed per modality, on one line."""
        return delivery_line(self.sent, self.by_modality, self.failed_by_modality)

    def note(self, reason: str) -> None:
        """Keep ``reason`` among the first distinct errors."""
        if len(self.errors) < MAX_ERRORS and reason not in self.errors:
            self.errors.append(reason)


def _unpickle_report(state: dict[str, Any]) -> PublishReport:
    keys = TokenSet()
    for (stream_id, modality_value), raw in state["keys"].items():
        seqs = array.array("q")
        seqs.frombytes(raw)
        keys.add_seqs(stream_id, Modality(modality_value), seqs)
    return PublishReport(**{**state, "keys": keys})


class OutageLog:
    """Logs a broker outage once per interval, and its end once; thread-safe.

    An outage starts when records have waited ``stall_s`` without any acknowledgement,
    or, while connecting, ``stall_s`` after the first failed attempt. Clients call
    :meth:`trouble` with what failed (the reason shown), :meth:`progress` on each
    acknowledgement or successful connection, and :meth:`check` often.
    """

    def __init__(self, bootstrap: str, *, interval_s: float = 10.0, stall_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger = log) -> None:
        """Watch the broker(s) at ``bootstrap``; log every ``interval_s`` while down."""
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.stall_s = stall_s
        self._clock = clock
        self._log = logger
        self._lock = threading.Lock()
        self._progress_at = clock()
        self._trouble_at: float | None = None
        self._reason = ""
        self._since: float | None = None
        self._logged_at: float | None = None
        #: Outages seen so far.
        self.outages = 0

    @property
    def down_for(self) -> float | None:
        """Seconds the current outage has lasted, or None when there is none."""
        with self._lock:
            return None if self._since is None else self._clock() - self._since

    def trouble(self, reason: str) -> None:
        """A client could not reach the broker (the first reason is kept)."""
        with self._lock:
            if self._trouble_at is None:
                self._trouble_at, self._reason = self._clock(), reason

    def progress(self) -> None:
        """The broker answered; ends an outage (logging its length)."""
        with self._lock:
            now = self._clock()
            self._progress_at, self._trouble_at, self._reason = now, None, ""
            since, self._since, self._logged_at = self._since, None, None
        if since is not None:
            self._log.warning("broker %s reachable again after %.0f s", self.bootstrap,
                              now - since, extra={"stage": "publish"})

    def check(self, waiting: int, *, connecting: bool = False) -> bool:
        """Log the outage if one is on and its interval is due; whether one is on.

        Args:
            waiting: Records sent and not yet acknowledged.
            connecting: The client is still trying to connect (nothing can wait yet).
        """
        with self._lock:
            now = self._clock()
            if self._since is None:
                if not waiting and not connecting:
                    # idle: neither a stall nor an old connection error is an outage
                    self._progress_at, self._trouble_at, self._reason = now, None, ""
                    return False
                start = self._trouble_at if connecting else self._progress_at
                if start is None or now - start < self.stall_s:
                    return False
                self._since = start
                self.outages += 1
            if not (waiting or connecting) or (
                    self._logged_at is not None and now - self._logged_at < self.interval_s):
                return True
            self._logged_at = now
            down, reason = now - self._since, self._reason
        self._log.warning("broker %s unreachable for %.0f s; %s tokens waiting%s",
                          self.bootstrap, down, f"{waiting:,}",
                          f" ({reason})" if reason else "", extra={"stage": "publish"})
        return True


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


def _retriable(error: BaseException) -> bool:
    # an expired batch (KafkaTimeoutError) is a delivery that may succeed when retried
    return bool(getattr(error, "retriable", False)) or isinstance(error, KafkaTimeoutError)


class RetryingSender:
    """An aiokafka producer that re-sends on retriable failures until the delivery timeout.

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
        self._producer: AIOKafkaProducer | None = None
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

    def _make(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self._kafka.aiokafka_options(), acks="all", linger_ms=self._kafka.linger_ms,
            max_batch_size=1_048_576, max_request_size=self._kafka.max_record_bytes,
            request_timeout_ms=int(self.request_timeout_s * 1000))

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
            except KafkaError as exc:
                await producer.stop()
                if not _retriable(exc):
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
        except KafkaError as exc:
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
        if _retriable(error) and not self._stopping:
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
