"""Retrying through broker outages: which failures a retry fixes, and one line per outage.

Every producer path of Lockstep (the roles' :class:`~lockstep.kafka.outbox.Outbox`, the
synthetic publisher's :class:`~lockstep.kafka.sender.RetryingSender`, the
:class:`~lockstep.producer.publisher.Publisher`) re-sends what fails for a reason a retry
can fix (:func:`retriable`) and tells an :class:`OutageLog`, which says once per interval
that the broker is unreachable and how much waits, and once that it is back: not one line
per record.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from aiokafka.errors import KafkaError, KafkaTimeoutError

from lockstep.errors import DeliveryFailed

log = logging.getLogger(__name__)


#: What a send of either asyncio producer raises (aiokafka's errors, librdkafka's refusals).
SEND_ERRORS: tuple[type[BaseException], ...] = (KafkaError, DeliveryFailed)


def retriable(error: BaseException) -> bool:
    """Whether a delivery that failed with ``error`` may succeed when sent again.

    A delivery that timed out (the broker was away) or was cancelled may; so may any
    error the client marks retriable (leader moved, not enough replicas, …).
    """
    if isinstance(error, KafkaTimeoutError | asyncio.CancelledError):
        return True
    return bool(getattr(error, "retriable", False))


#: Default time a record may take from its first send to its acknowledgement.
DELIVERY_TIMEOUT_S = 120.0


class OutageLog:
    """Logs a broker outage once per interval, and its end once; thread-safe.

    An outage starts when records have waited ``stall_s`` without any acknowledgement,
    or, while connecting, ``stall_s`` after the first failed attempt. Clients call
    :meth:`trouble` with what failed (the reason shown), :meth:`progress` on each
    acknowledgement or successful connection, and :meth:`check` often.
    """

    def __init__(self, bootstrap: str, *, interval_s: float = 10.0, stall_s: float = 2.0,
                 told_of_failures: bool = False, noun: str = "tokens", stage: str = "publish",
                 clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger = log) -> None:
        """Watch the broker(s) at ``bootstrap``; log every ``interval_s`` while down.

        Args:
            bootstrap: The brokers, as the log lines name them.
            interval_s: At most one "unreachable" line per this many seconds.
            stall_s: How long records may wait without an acknowledgement (or a client
                fail to connect) before it counts as an outage.
            told_of_failures: The client calls :meth:`trouble` for every failed delivery,
                so an outage begins at the first failure, not when acknowledgements stop.
            noun: What waits, in the log lines (``tokens``, ``records``).
            stage: The ``stage`` field of the log lines.
            clock: Monotonic seconds.
            logger: Where the lines go.
        """
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.stall_s = stall_s
        self._told = told_of_failures
        self._noun = noun
        self._extra = {"stage": stage}
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
        if self._since is None and self._trouble_at is None:  # the usual case: no lock
            if not self._told:  # (a stall is measured from the last acknowledgement)
                self._progress_at = self._clock()
            return
        with self._lock:
            now = self._clock()
            self._progress_at, self._trouble_at, self._reason = now, None, ""
            since, self._since, self._logged_at = self._since, None, None
        if since is not None:
            self._log.warning("broker %s reachable again after %.0f s", self.bootstrap,
                              now - since, extra=self._extra)

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
                start = self._trouble_at if connecting or self._told else self._progress_at
                if start is None or now - start < self.stall_s:
                    return False
                self._since = start
                self.outages += 1
            if not (waiting or connecting) or (
                    self._logged_at is not None and now - self._logged_at < self.interval_s):
                return True
            self._logged_at = now
            down, reason = now - self._since, self._reason
        self._log.warning("broker %s unreachable for %.0f s; %s %s waiting%s",
                          self.bootstrap, down, f"{waiting:,}", self._noun,
                          f" ({reason})" if reason else "", extra=self._extra)
        return True

