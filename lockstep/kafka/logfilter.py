"""Third-party client logs through Python logging, quiet and rate-limited.

Kafka clients log every failed reconnect and every retried request; while a broker is
down that is hundreds of lines a second. :func:`route_client_logs` sends the records of
the client loggers (aiokafka, kafka, librdkafka via confluent-kafka's ``logger`` option)
through a :class:`RateLimitFilter` to the root logger's handlers: at most ``burst``
records per message template and interval, the next one saying how many were held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

#: The loggers Kafka clients write to. confluent-kafka has none of its own: give it
#: ``logging.getLogger(LIBRDKAFKA)`` as its ``logger`` option.
LIBRDKAFKA = "librdkafka"
CLIENT_LOGGERS: tuple[str, ...] = ("aiokafka", "kafka", LIBRDKAFKA)


def template_key(record: logging.LogRecord) -> Hashable:
    """Group records by logger, level and message template.

    A template that starts with ``%s`` (librdkafka's ``"%s [%s] %s"``: facility, client,
    text) also keys on its first argument, so each facility has its own budget.
    """
    msg = str(record.msg)
    lead = record.args[0] if (msg.startswith("%s") and isinstance(record.args, tuple)
                              and record.args) else None
    return record.name, record.levelno, msg, str(lead) if lead is not None else None


class RateLimitFilter(logging.Filter):
    """Passes ``burst`` records per key and interval; counts the rest.

    The first record let through after some were held back carries
    ``(N similar suppressed in the last S s)`` at the end of its message and the count in
    its ``suppressed`` attribute. Thread-safe.
    """

    def __init__(self, interval_s: float = 10.0, burst: int = 1, *,
                 key: Callable[[logging.LogRecord], Hashable] = template_key,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 1024) -> None:
        """Create the filter.

        Args:
            interval_s: Length of one budget window per key.
            burst: Records let through per key and window.
            key: Groups records that count against the same budget.
            clock: Monotonic seconds (a fake in tests).
            max_keys: Keys remembered; the least recently seen is forgotten first.
        """
        super().__init__()
        self.interval_s = interval_s
        self.burst = burst
        self._key = key
        self._clock = clock
        self._max_keys = max_keys
        self._lock = threading.Lock()
        # key → [window start, passed in window, suppressed since the last pass]
        self._windows: OrderedDict[Hashable, list[float]] = OrderedDict()
        #: Records held back since the filter was made.
        self.suppressed_total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is let through (it may get a suppression note)."""
        key = self._key(record)
        now = self._clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = [now, 0.0, 0.0]
                if len(self._windows) > self._max_keys:
                    self._windows.popitem(last=False)
            else:
                self._windows.move_to_end(key)
                if now - window[0] >= self.interval_s:
                    window[0], window[1] = now, 0.0
            if window[1] >= self.burst:
                window[2] += 1
                self.suppressed_total += 1
                return False
            window[1] += 1
            held, window[2] = int(window[2]), 0.0
        if held:
            record.suppressed = held
            record.msg = (f"{record.msg} ({held} similar suppressed in the last "
                          f"{self.interval_s:g} s)")
        return True


class _Forward(logging.Handler):
    """Hands records on to the root logger's handlers, after this handler's filters."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger().handle(record)


def route_client_logs(*, level: int = logging.WARNING, interval_s: float = 10.0,
                      burst: int = 1, loggers: Sequence[str] = CLIENT_LOGGERS
                      ) -> RateLimitFilter:
    """Quiet the client loggers and rate-limit them; idempotent per logger.

    Each logger gets ``level`` (or the root logger's level, if that is less verbose) and
    stops propagating; its records (and its children's) reach the root logger's handlers
    through one shared :class:`RateLimitFilter`. Calling again replaces the earlier
    routing.

    Args:
        level: Least severe level kept (records below it are dropped unformatted).
        interval_s: The filter's budget window per message template.
        burst: Records per template and window.
        loggers: Names of the client loggers.

    Returns:
        The filter, whose ``suppressed_total`` says how much was held back.
    """
    limiter = RateLimitFilter(interval_s, burst)
    level = max(level, logging.getLogger().level)
    for name in loggers:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, _Forward)]:
            logger.removeHandler(handler)
        forward = _Forward()
        forward.addFilter(limiter)
        logger.addHandler(forward)
        logger.setLevel(level)
        logger.propagate = False
    return limiter


class WarningSummary(logging.Filter):
    """Holds WARNING records back and counts them by logger and message template."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        #: The first message of each kind, as it would have been printed.
        self.examples: dict[tuple[str, str], str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Let everything but WARNING records through; count those."""
        if record.levelno != logging.WARNING:
            return True
        if not getattr(record, "_lockstep_held", False):  # once, however many handlers
            record._lockstep_held = True
            msg = str(record.msg)
            key = (record.name, msg[:80] if record.args else _template(msg))
            self.counts[key] = self.counts.get(key, 0) + 1
            if key not in self.examples:
                self.examples[key] = record.getMessage()[:120]
        return False

    def summary(self) -> str:
        """One line per kind of warning held back ("" when there was none)."""
        if not self.counts:
            return ""
        total = sum(self.counts.values())
        kinds = "; ".join(
            f"{n} x {self.examples.get((name, msg), msg)}{' (the first)' if n > 1 else ''} "
            f"({name})"
            for (name, msg), n in sorted(self.counts.items(), key=lambda kv: -kv[1])[:8])
        return (f"{total} warning{'s' if total != 1 else ''} during the run (--log-level info "
                f"shows them as they happen): {kinds}")


def _template(msg: str) -> str:
    """A formatted message without its numbers, so repeats of one warning count together."""
    words = [w for w in msg.split() if not any(c.isdigit() for c in w)]
    return " ".join(words)[:80] or msg[:80]


class summarised_warnings:
    """For the run of a command: warnings summarised once at the end instead of printed.

    Only at the default log level (``warning``); with ``info`` or ``debug`` every record
    is printed as it happens.
    """

    def __init__(self, log_level: str) -> None:
        self._active = log_level.lower() == "warning"
        self._filter = WarningSummary()

    def __enter__(self) -> WarningSummary:
        if self._active:
            for handler in logging.getLogger().handlers:
                handler.addFilter(self._filter)
        return self._filter

    def __exit__(self, *exc: object) -> None:
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._filter)
