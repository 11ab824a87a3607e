"""Synthetic streams published in real time (``lockstep publish --synthetic``, the demo).

:func:`publish_synthetic` produces each synthetic token when its capture time comes, on
aiokafka through :class:`~lockstep.kafka.sender.RetryingSender`: it counts acknowledgements,
not sends, retries through a broker restart up to a delivery timeout and reports what
still failed. The ``publish`` stage latency is capture time → broker acknowledgement.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.retry import DELIVERY_TIMEOUT_S, OutageLog
from lockstep.kafka.sender import Outgoing, RetryingSender
from lockstep.producer.delivery import PublishReport
from lockstep.producer.synthetic import SyntheticConfig, SyntheticStream
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import AudioToken

log = logging.getLogger(__name__)

#: Records that are not Lockstep tokens, published by ``--inject-bad`` to show dead-lettering.
BAD_RECORDS: tuple[bytes, ...] = (
    b"not a lockstep record",
    b"LS\x09\x01unsupported version",
    b"LS\x01\x01\xc1",  # valid header, broken MessagePack
)


#: How far ahead of the clock a held run's end is kept while its hold says "go on": longer
#: than a modality's period, so that no token is marked final before the run is extended.
_HOLD_AHEAD_S = 2.0

async def publish_synthetic(
    kafka: KafkaSettings,
    stream_ids: Sequence[str],
    seconds: float,
    telemetry: Telemetry,
    *,
    config: SyntheticConfig | None = None,
    configs: Mapping[str, SyntheticConfig] | None = None,
    inject_bad: int = 0,
    tick_s: float = 0.005,
    delivery_timeout_s: float = DELIVERY_TIMEOUT_S,
    outage_log_s: float = 10.0,
    epoch_us: int | None = None,
    on_tick: Callable[[PublishReport, float], None] | None = None,
    tick_every_s: float = 0.5,
    hold: Callable[[], float | None] | None = None,
) -> PublishReport:
    """Publish synthetic streams for ``seconds`` of wall time, paced by capture time.

    Waits for the broker first (up to ``delivery_timeout_s``). Every token captured in
    the first ``seconds`` is sent, also those that came due while a send waited for the
    broker; returns once each is acknowledged or given up on (``report.ok``: all were).
    Each stream's last token of each modality is sent ``final``, so align closes the
    stream's last window at once rather than at its deadline.

    Args:
        kafka: Connection settings.
        stream_ids: One synthetic stream per id.
        seconds: How long to publish.
        telemetry: Receives the ``publish`` stage latency.
        config: Rates and sizes of the streams.
        configs: Per-stream configurations that override ``config``.
        inject_bad: Also publish this many undecodable records (spread over the run).
        tick_s: Pacing interval.
        delivery_timeout_s: How long a token is re-sent after retriable failures.
        outage_log_s: Interval of the "broker unreachable" log line.
        epoch_us: Anchor of the capture grid (``seq`` 0); None: each stream's start. With
            a fixed epoch a stream published again under the same id continues its ``seq``
            (:class:`~lockstep.producer.synthetic.SyntheticStream`).
        on_tick: Called with the report and the seconds elapsed every ``tick_every_s``
            while publishing, and once at the end (progress).
        tick_every_s: Interval of ``on_tick``.
        hold: Asked every tick how long publishing must go on: until the monotonic time it
            returns at least, and as long as it returns None (``lockstep chaos``: until
            some time after its fault has passed, however long the fault took). The run
            is never shorter than ``seconds``.

    Raises:
        BrokerError: No broker answered within ``delivery_timeout_s`` (nothing was sent).
    """
    report = PublishReport()
    outage = OutageLog(kafka.require_bootstrap(), interval_s=outage_log_s)
    sender = RetryingSender(kafka, on_ack=partial(_acked, report, telemetry),
                            on_fail=partial(_failed, report), outage=outage,
                            delivery_timeout_s=delivery_timeout_s)
    await sender.start()
    start_us = time.time_ns() // 1000
    end_us = start_us + round(seconds * 1e6)
    sources = [SyntheticStream(sid, start_us, (configs or {}).get(sid) or config
                               or SyntheticConfig(), epoch_us, until_us=end_us)
               for sid in stream_ids]
    bad_every = seconds / (inject_bad + 1) if inject_bad else 0.0
    bad_sent = 0
    begin = ticked = time.monotonic()
    length = seconds

    def extend(elapsed: float) -> None:
        """Push the end out to what ``hold`` asks, :data:`_HOLD_AHEAD_S` ahead of it."""
        nonlocal length, end_us
        until = hold() if hold is not None else begin
        wanted = elapsed + _HOLD_AHEAD_S if until is None else until - begin
        if wanted > length:
            length = wanted
            end_us = start_us + round(length * 1e6)
            for source in sources:  # no token is marked final before the new end
                source.until_us = end_us

    async def send_due(now_us: int) -> None:
        for source in sources:
            # As a device sends them: an audio chunk once it is captured whole.
            for token in source.due(min(now_us, end_us), whole=True):
                key = TokenKey(token.stream_id, token.modality, token.seq)
                value = encode(token)
                report.count_sent(key, len(value))
                captured = token.t_us + (token.duration_us
                                         if isinstance(token, AudioToken) else 0)
                await sender.send(Outgoing(catalog.MEDIA[token.modality], value,
                                           token.stream_id.encode(), token.modality.value,
                                           key, captured))

    async def send_bad(n: int) -> None:
        topic = list(catalog.MEDIA.values())[n % len(catalog.MEDIA)]
        await sender.send(Outgoing(topic, BAD_RECORDS[n % len(BAD_RECORDS)],
                                   stream_ids[0].encode(), "bad"))

    try:
        while True:
            elapsed = time.monotonic() - begin
            if hold is not None:
                extend(elapsed)
            if elapsed >= length:
                break
            await send_due(time.time_ns() // 1000)
            while inject_bad and bad_sent < inject_bad and elapsed >= bad_every * (bad_sent + 1):
                await send_bad(bad_sent)
                bad_sent += 1
            if on_tick is not None and time.monotonic() - ticked >= tick_every_s:
                ticked = time.monotonic()
                on_tick(report, ticked - begin)
            await asyncio.sleep(tick_s)
        await send_due(end_us)  # what came due while a send waited for the broker
        for n in range(bad_sent, inject_bad):  # a stalled loop may have ended first: all go
            await send_bad(n)
        await sender.drain()
    finally:
        await sender.stop()
        report.retries = sender.retries
    report.seconds = time.monotonic() - begin
    if on_tick is not None:
        on_tick(report, report.seconds)
    if not report.ok:
        log.warning("not every token was delivered: %s", report.line(),
                    extra={"stage": "publish"})
    return report


def _acked(report: PublishReport, telemetry: Telemetry, item: Outgoing) -> None:
    if item.token is None:
        report.bad_records += 1
        return
    report.keys.add(item.token)
    report.by_modality[item.label] += 1
    telemetry.stage("publish", max(0.0, (time.time_ns() // 1000 - item.capture_us) / 1e6))
    telemetry.token(item.label, "published")  # the ledger's left-hand side


def _failed(report: PublishReport, item: Outgoing, reason: str) -> None:
    if item.token is None:
        report.bad_records_failed += 1
    else:
        report.failed[item.token] = reason
    report.note(reason)
