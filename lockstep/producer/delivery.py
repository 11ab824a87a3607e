"""Delivery that is acknowledged, retried and reported, for both producer paths.

- :class:`OutageLog` says once per interval that the broker is unreachable and how many
  records wait, and once that it is back (not one line per record).
- :class:`~lockstep.kafka.sender.RetryingSender` (its own module) wraps an aiokafka producer: a
  send that fails with a retriable error is sent again with backoff until its delivery
  timeout.
- :class:`DeliveryStats` (the :class:`~lockstep.producer.publisher.Publisher`'s) and
  :class:`PublishReport` (``publish_synthetic``'s) say what was sent, acknowledged and
  failed per modality; :func:`delivery_line` puts that on one line.
"""

from __future__ import annotations

import array
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lockstep.observe.ledger import TokenSet
from lockstep.streams.align.aligner import TokenKey
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
        meanwhile. From arrays, the :class:`~lockstep.observe.ledger.TokenSet` is rebuilt one
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
