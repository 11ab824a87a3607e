"""On Apache Kafka, a backlog of stale media is shed in few late records, and committed."""

from __future__ import annotations

import asyncio
import secrets
import time

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from lockstep.agents.wait import topic_partitions
from lockstep.ledger import late_tokens
from lockstep.runner import prepare_topics, start_roles
from lockstep.streams.aligner import TokenKey
from lockstep.streams.app import group_id
from lockstep.streams.settings import load_settings
from lockstep.streams.telemetry import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import HEADER_SIZE, encode
from lockstep.topics.schemas import AudioToken, Modality, VideoToken
from lockstep.topics.vectors import JPEG_16X8

pytestmark = pytest.mark.integration
STREAMS, FRAMES = 3, 120


async def _late_records(bootstrap: str, prefix: str) -> list[dict[str, object]]:
    """The late records of this test's streams, to the topic's current end (MessagePack)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False)
    await consumer.start()
    found: list[dict[str, object]] = []
    try:
        tps = await topic_partitions(consumer, catalog.LATE)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            found += [msgpack.unpackb(r.value[HEADER_SIZE:]) for records in batches.values()
                      for r in records if r.key is not None and r.key.startswith(prefix.encode())]
    finally:
        await consumer.stop()
    return found


async def test_a_stale_backlog_is_shed_a_run_per_record_and_every_token_committed(
        apache_kafka: str) -> None:
    settings = load_settings(
        kafka={"bootstrap_servers": apache_kafka, "session_timeout_ms": 6000,
               "fetch_max_wait_ms": 10, "new_group_offset": "latest"},
        app_id=f"shed-{secrets.token_hex(3)}", metrics={"enabled": False})
    prefix = f"shed-{secrets.token_hex(3)}-"
    await prepare_topics(settings, create=True)
    roles = await start_roles(settings, ["align"], Telemetry())
    published: set[TokenKey] = set()
    written = []
    try:
        assert await roles.wait_assigned()
        producer = AIOKafkaProducer(**settings.kafka.aiokafka_options(), linger_ms=20)
        await producer.start()
        # A minute old when read: a backlog no window can wait for.
        t0 = time.time_ns() // 1000 - 60_000_000
        try:
            sends = []
            for n in range(STREAMS):
                stream = f"{prefix}{n}"
                for seq in range(FRAMES):
                    t_us = t0 + seq * 33_333
                    frame = VideoToken(stream_id=stream, seq=seq, t_us=t_us, format="jpeg",
                                       width=16, height=8, data=JPEG_16X8)
                    audio = AudioToken(stream_id=stream, seq=seq, t_us=t_us,
                                       encoding="pcm_s16le", sample_rate=16_000, channels=1,
                                       duration_us=20_000, data=b"\0" * 640)
                    for token, modality in ((frame, Modality.VIDEO), (audio, Modality.AUDIO)):
                        sends.append(await producer.send(catalog.MEDIA[modality], encode(token),
                                                         key=stream.encode()))
                        published.add(TokenKey(stream, modality, seq))
            written = await asyncio.gather(*sends)
        finally:
            await producer.stop()
        deadline = time.monotonic() + 60
        settled: set[TokenKey] = set()
        records: list[dict[str, object]] = []
        while time.monotonic() < deadline and settled != published:
            records = await _late_records(apache_kafka, prefix)
            settled = {t for r in records for t in late_tokens(r)}
            await asyncio.sleep(0.5)
        assert settled == published
        assert {r["code"] for r in records} == {"stale"}
        # One record a stream, modality and batch read: far fewer records than tokens.
        assert len(records) <= len(published) // 10, len(records)
        assert any(r["more_seqs"] for r in records)
        # Every shed token is acknowledged with its record: the group commits past it.
        last: dict[TopicPartition, int] = {}
        for meta in written:
            tp = TopicPartition(meta.topic, meta.partition)
            last[tp] = max(last.get(tp, -1), meta.offset)
        consumer = AIOKafkaConsumer(bootstrap_servers=apache_kafka,
                                    group_id=group_id(settings, "align"),
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            behind = dict(last)
            while time.monotonic() < deadline + 30 and behind:
                for tp, offset in list(behind.items()):
                    if (await consumer.committed(tp) or 0) > offset:
                        del behind[tp]
                await asyncio.sleep(0.5)
            assert not behind, f"not committed past the shed tokens: {behind}"
        finally:
            await consumer.stop()
        assert roles.crash_reason is None
    finally:
        await roles.stop()
