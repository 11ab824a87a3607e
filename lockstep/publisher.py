"""Publishing synthetic media streams in real time (``lockstep publish --synthetic``, the demo).

Each token is produced when its capture time comes, keyed by ``stream_id`` to its
``media.*`` topic; the ``publish`` stage latency is capture time → broker acknowledgement.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.aligner import TokenKey
from streams.settings import KafkaSettings
from streams.synthetic import SyntheticConfig, SyntheticStream
from streams.telemetry import Telemetry
from topics import catalog
from topics.codec import encode

#: Records that are not Lockstep tokens, published by ``--inject-bad`` to show dead-lettering.
BAD_RECORDS: tuple[bytes, ...] = (
    b"not a lockstep record",
    b"LS\x09\x01unsupported version",
    b"LS\x01\x01\xc1",  # valid header, broken MessagePack
)


@dataclass
class PublishReport:
    """What was published: the ledger's left-hand side."""

    keys: set[TokenKey] = field(default_factory=set)
    by_modality: Counter[str] = field(default_factory=Counter)
    bad_records: int = 0
    seconds: float = 0.0


def producer(kafka: KafkaSettings) -> AIOKafkaProducer:
    """An aiokafka producer tuned for media: 1 MB batches, 2 ms linger, all acks."""
    return AIOKafkaProducer(
        **kafka.aiokafka_options(),
        acks="all",
        linger_ms=2,
        max_batch_size=1_048_576,
        max_request_size=kafka.max_record_bytes,
    )


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
) -> PublishReport:
    """Publish synthetic streams for ``seconds`` of wall time, paced by capture time.

    Args:
        kafka: Connection settings.
        stream_ids: One synthetic stream per id.
        seconds: How long to publish.
        telemetry: Receives the ``publish`` stage latency.
        config: Rates and sizes of the streams.
        configs: Per-stream configurations that override ``config``.
        inject_bad: Also publish this many undecodable records (spread over the run).
        tick_s: Pacing interval.
    """
    report = PublishReport()
    start_us = time.time_ns() // 1000
    sources = [SyntheticStream(sid, start_us, (configs or {}).get(sid) or config
                               or SyntheticConfig()) for sid in stream_ids]
    pending: list[asyncio.Future[Any]] = []
    bad_every = seconds / (inject_bad + 1) if inject_bad else 0.0
    begin = time.monotonic()
    prod = producer(kafka)
    await prod.start()
    try:
        while (elapsed := time.monotonic() - begin) < seconds:
            now_us = time.time_ns() // 1000
            for source in sources:
                for token in source.due(now_us):
                    future = await prod.send(catalog.MEDIA[token.modality], encode(token),
                                             key=token.stream_id.encode())
                    future.add_done_callback(_acked(telemetry, token.t_us))
                    pending.append(future)
                    report.keys.add(TokenKey(token.stream_id, token.modality, token.seq))
                    report.by_modality[token.modality.value] += 1
            if inject_bad and report.bad_records < inject_bad and elapsed >= bad_every * (
                    report.bad_records + 1):
                value = BAD_RECORDS[report.bad_records % len(BAD_RECORDS)]
                topic = list(catalog.MEDIA.values())[report.bad_records % len(catalog.MEDIA)]
                pending.append(await prod.send(topic, value, key=stream_ids[0].encode()))
                report.bad_records += 1
            pending = [f for f in pending if not f.done()]
            await asyncio.sleep(tick_s)
        await prod.flush()
        await asyncio.gather(*pending)
    finally:
        await prod.stop()
    report.seconds = time.monotonic() - begin
    return report


def _acked(telemetry: Telemetry, capture_us: int) -> Any:
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            telemetry.stage("publish", max(0.0, (time.time_ns() // 1000 - capture_us) / 1e6))
    return done
