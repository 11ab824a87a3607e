"""Publishing tokens: the :class:`Publisher` API.

:class:`Publisher` is the producer's Python API on confluent-kafka
(:class:`~lockstep.kafka.producer.LibrdkafkaProducer`): tokens keyed by ``stream_id`` to
their ``media.*`` topic with the Java-compatible murmur2 partitioner, idempotence on,
batching, compression, delivery reports, and a bound on the data in flight (``publish``
blocks while it is full). It counts acknowledgements, not sends, retries
through a broker restart up to a delivery timeout and reports what still failed; a token
align would dead-letter for its capture time (too far in the future) is refused before it
is sent, and counted. Tokens of the streams marked with :meth:`Publisher.mark_replay` are
sent as replayed media (docs/wire-format.md §4). The ``publish`` stage latency is capture
time → broker acknowledgement. :func:`publish_synthetic` lives in
:mod:`lockstep.producer.realtime`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable
from functools import partial

from lockstep.config.settings import KafkaSettings
from lockstep.errors import ConfigError
from lockstep.kafka.producer import Compression, DeliveryError, LibrdkafkaProducer, OnDelivery
from lockstep.kafka.retry import DELIVERY_TIMEOUT_S, OutageLog
from lockstep.producer.delivery import MAX_ERRORS, DeliveryStats
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import Token

log = logging.getLogger(__name__)


class Publisher:
    """Publishes tokens to their ``media.*`` topics; thread-safe.

    Use as a context manager, or call :meth:`close` (which flushes) when done::

        with Publisher(settings.kafka) as publisher:
            publisher.publish(token)
        publisher.stats()

    librdkafka retries a failed delivery (broker restart, leader change, timeout) until
    ``delivery_timeout_s``; then the delivery report counts the token as failed. Its
    logs go to the ``librdkafka`` logger (see :func:`lockstep.kafka.logfilter.route_client_logs`).
    """

    def __init__(self, kafka: KafkaSettings, *, compression: Compression = "lz4",
                 linger_ms: float = 5.0, batch_bytes: int = 1_048_576,
                 max_in_flight_bytes: int = 64 * 1_048_576, idempotence: bool = True,
                 telemetry: Telemetry | None = None, block_timeout_s: float | None = None,
                 delivery_timeout_s: float = DELIVERY_TIMEOUT_S, track_keys: bool = False,
                 outage_log_s: float = 10.0, max_future_ms: float | None = 5_000.0) -> None:
        """Create the producer.

        Args:
            kafka: Connection settings (``confluent_extra`` passes through last).
            compression: Batch compression (lz4/zstd/snappy readers need cramjam).
            linger_ms: How long a batch may wait to fill.
            batch_bytes: Largest batch per partition.
            max_in_flight_bytes: Data produced but not yet acknowledged; :meth:`publish`
                blocks while more would be in flight.
            idempotence: Broker-side de-duplication of retries (needs a Kafka cluster;
                the embedded broker does not support it).
            telemetry: Receives the ``publish`` latency (capture → ack) when given; give
                it only when ``t_us`` is the wall clock (real-time capture).
            block_timeout_s: How long :meth:`publish` waits for room before failing
                (default: the delivery timeout, after which room is made by failures).
            delivery_timeout_s: Time from :meth:`publish` to acknowledgement, retries
                included, after which a token counts as failed.
            track_keys: Keep the key of every token acknowledged or failed
                (:meth:`acknowledged_keys`, :meth:`failed_keys`).
            outage_log_s: Interval of the "broker unreachable" log line.
            max_future_ms: A token captured further ahead of the clock than this when it
                is published is refused, not sent: align would dead-letter it (give the
                pipeline's ``align.max_future_ms``; None: send every token).
        """
        self.delivery_timeout_s = delivery_timeout_s
        self.outage = OutageLog(kafka.require_bootstrap(), interval_s=outage_log_s)
        self._producer = LibrdkafkaProducer(
            kafka, self.outage, compression=compression, linger_ms=linger_ms,
            batch_bytes=batch_bytes, max_in_flight_bytes=max_in_flight_bytes,
            idempotence=idempotence, delivery_timeout_s=delivery_timeout_s,
            block_timeout_s=(delivery_timeout_s + 5.0 if block_timeout_s is None
                             else block_timeout_s),
            on_fatal=self._on_fatal)
        self._telemetry = telemetry
        self._track_keys = track_keys
        self._lock = threading.Lock()
        self._sent: Counter[str] = Counter()
        self._acked: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._max_future_us = None if max_future_ms is None else round(max_future_ms * 1000)
        self._replay: frozenset[str] = frozenset()
        self._acked_keys: set[TokenKey] = set()
        self._failed_keys: dict[TokenKey, str] = {}
        self._bytes = 0
        self._errors: list[str] = []

    def wait_for_topics(self, topics: Iterable[str] = catalog.MEDIA.values(),
                        timeout_s: float | None = None, missing_timeout_s: float = 5.0
                        ) -> None:
        """Wait for the broker (with backoff, up to ``timeout_s``) and for ``topics``.

        Args:
            topics: Topics that must exist.
            timeout_s: How long to wait for an unreachable broker (default: the delivery
                timeout); the outage is logged once per interval meanwhile.
            missing_timeout_s: How long to wait for topics that do not exist yet.

        Raises:
            BrokerError: The broker stayed unreachable, or a topic does not exist.
        """
        self._producer.wait_for_topics(
            topics, self.delivery_timeout_s if timeout_s is None else timeout_s,
            missing_timeout_s)

    def mark_replay(self, stream_ids: Iterable[str]) -> None:
        """Send the tokens of these streams as replayed media (``replay``, wire format §4).

        Their windows are answered but kept out of the live SLO figures.
        """
        self._replay = frozenset(stream_ids)

    def publish(self, token: Token) -> bool:
        """Encode and produce one token; block while the in-flight bound is reached.

        A token captured more than ``max_future_ms`` ahead of the clock is not sent: it
        counts as refused (and failed), with the reason among the errors.

        Returns:
            Whether it was sent (False: refused).

        Raises:
            BrokerError: No room in flight within ``block_timeout_s``, or the producer
                rejected the record (e.g. larger than ``message.max.bytes``).
        """
        modality = token.modality.value
        key = TokenKey(token.stream_id, token.modality, token.seq) if self._track_keys else None
        if self._max_future_us is not None:
            ahead_us = token.t_us - time.time_ns() // 1000
            if ahead_us > self._max_future_us:
                self._refuse(modality, key, f"t_us {token.t_us} is {ahead_us / 1e6:,.1f} s "
                             "ahead of the clock")
                return False
        value = self._produce(token, partial(self._on_delivery, modality, token.t_us, key))
        with self._lock:
            self._sent[modality] += 1
            self._bytes += len(value)
        self._serve()
        return True

    def end(self, tokens: Iterable[Token]) -> None:
        """Say that these tokens, already published, were the last of their modality.

        Each is sent again with ``final`` (the same ``seq``): align counts the copy as a
        duplicate, aligns nothing twice, and waits for no more of the modality, so the
        stream's last window closes now instead of at its deadline (wire format §6).
        Pass tokens :meth:`publish` sent (it returned True). Copies are not counted in
        :meth:`stats`; one that is not delivered only costs that wait, and its error is
        listed among the errors.

        Raises:
            BrokerError: As :meth:`publish`.
        """
        for token in tokens:
            if not token.final:
                token = token.model_copy(update={"final": True})
            self._produce(token, partial(self._on_end_delivery, token.modality.value))
            self._serve()

    def _produce(self, token: Token, callback: OnDelivery) -> bytes:
        """Encode and produce a token (blocking while the in-flight bound is reached).

        The caller counts it, then calls :meth:`_serve`, which may run its delivery callback.
        """
        if token.stream_id in self._replay and not token.replay:
            token = token.model_copy(update={"replay": True})
        value = encode(token)
        self._producer.produce(catalog.MEDIA[token.modality], token.stream_id.encode(), value,
                               callback, what=f"a {token.modality.value} token")
        return value

    def _serve(self) -> None:
        """Run the delivery callbacks that are due; note an outage."""
        self._producer.serve()

    def _on_end_delivery(self, modality: str, error: DeliveryError | None,
                         message: object) -> None:
        del message
        if error is not None:
            with self._lock:
                self._note(f"{modality} end of stream: {error.str()}")

    def _refuse(self, modality: str, key: TokenKey | None, reason: str) -> None:
        with self._lock:
            self._sent[modality] += 1
            self._failed[modality] += 1
            self._refused[modality] += 1
            self._note(f"{modality}: refused before sending: captured more than "
                       f"{(self._max_future_us or 0) / 1e6:g} s ahead of the clock, which "
                       "align dead-letters")
            if key is not None:
                self._failed_keys[key] = reason

    def flush(self, timeout_s: float | None = None) -> int:
        """Wait for every delivery report; return the number still in flight.

        Args:
            timeout_s: How long to wait (default: the delivery timeout plus 10 s, by
                which librdkafka has reported every token as acknowledged or failed).
        """
        return self._producer.flush(self.delivery_timeout_s + 10.0 if timeout_s is None
                                    else timeout_s)

    def close(self, timeout_s: float | None = None) -> int:
        """Flush; return the number of tokens still undelivered."""
        return self.flush(timeout_s)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> DeliveryStats:
        """A snapshot of what was sent, acknowledged and failed."""
        with self._lock:
            return DeliveryStats(dict(self._sent), dict(self._acked), dict(self._failed),
                                 self._bytes, tuple(self._errors), dict(self._refused))

    def acknowledged_keys(self) -> set[TokenKey]:
        """Keys of the tokens acknowledged so far (needs ``track_keys``)."""
        self._require_keys()
        with self._lock:
            return set(self._acked_keys)

    def failed_keys(self) -> dict[TokenKey, str]:
        """Keys of the tokens that failed so far, with the reason (needs ``track_keys``)."""
        self._require_keys()
        with self._lock:
            return dict(self._failed_keys)

    def _require_keys(self) -> None:
        if not self._track_keys:
            raise ConfigError("token keys are kept only with Publisher(track_keys=True)")

    def _on_fatal(self, error: str) -> None:
        with self._lock:
            self._note(f"fatal: {error}")
        log.error("producer failed: %s", error, extra={"stage": "publish"})

    def _note(self, reason: str) -> None:
        if len(self._errors) < MAX_ERRORS and reason not in self._errors:
            self._errors.append(reason)

    def _on_delivery(self, modality: str, capture_us: int, key: TokenKey | None,
                     error: DeliveryError | None, message: object) -> None:
        del message
        if error is None:
            self.outage.progress()
        with self._lock:
            if error is not None:
                self._failed[modality] += 1
                self._note(f"{modality}: {error.str()}")
                if key is not None:
                    self._failed_keys[key] = error.str()
                return
            self._acked[modality] += 1
            if key is not None:
                self._acked_keys.add(key)
            if self._telemetry is not None:  # under the lock: callbacks run in any thread
                self._telemetry.stage(
                    "publish", max(0.0, (time.time_ns() // 1000 - capture_us) / 1e6))
                self._telemetry.token(modality, "published")
