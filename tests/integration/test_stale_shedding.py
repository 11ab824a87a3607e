"""On Apache Kafka, a backlog of stale media is shed in few late records, and committed."""

from __future__ import annotations

import asyncio
import secrets
import time

import msgpack
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from lockstep.agents.app import group_id
from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.config.settings import load_settings
from lockstep.kafka.wait import topic_partitions
from lockstep.observe.ledger import Ledger
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import HEADER_SIZE, encode
from lockstep.topics.keys import TokenKey, late_tokens
from lockstep.topics.schemas import AudioToken, Modality, VideoToken
from lockstep.topics.vectors import JPEG_16X8

pytestmark = pytest.mark.integration
STREAMS, FRAMES = 3, 120


async def _values(bootstrap: str, topic: str, prefix: str) -> list[bytes]:
    """The records of this test's streams on ``topic``, to its current end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False)
    await consumer.start()
    found: list[bytes] = []
    try:
        tps = await topic_partitions(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            found += [r.value for records in batches.values() for r in records
                      if r.key is not None and r.key.startswith(prefix.encode())
                      and r.value is not None]
    finally:
        await consumer.stop()
    return found


async def _late_records(bootstrap: str, prefix: str) -> list[dict[str, object]]:
    """The late records of this test's streams, to the topic's current end (MessagePack)."""
    return [msgpack.unpackb(v[HEADER_SIZE:])
            for v in await _values(bootstrap, catalog.LATE, prefix)]


def _tokens(stream: str, seqs: range, t_us: int) -> list[tuple[VideoToken | AudioToken,
                                                              Modality]]:
    """A video frame and an audio chunk a seq, the first captured at ``t_us``."""
    out: list[tuple[VideoToken | AudioToken, Modality]] = []
    for seq in seqs:
        at = t_us + (seq - seqs.start) * 33_333
        out.append((VideoToken(stream_id=stream, seq=seq, t_us=at, format="jpeg", width=16,
                               height=8, data=JPEG_16X8), Modality.VIDEO))
        out.append((AudioToken(stream_id=stream, seq=seq, t_us=at, encoding="pcm_s16le",
                               sample_rate=16_000, channels=1, duration_us=20_000,
                               data=b"\0" * 640), Modality.AUDIO))
    return out


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
                for token, modality in _tokens(stream, range(FRAMES), t0):
                    sends.append(await producer.send(catalog.MEDIA[modality], encode(token),
                                                     key=stream.encode()))
                    published.add(TokenKey(stream, modality, token.seq))
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


async def test_a_backlog_found_stale_is_crossed_to_the_log_end_and_fresh_data_aligned(
        apache_kafka: str) -> None:
    """Fast-forward: behind a stale token, tokens not stale yet but old are skipped too.

    A class budget of 60 s keeps the test clear of start-up time: stale past 60 s, and
    once a partition reads a stale token, tokens older than 30 s (``stale_resume_share``
    0.5) are skipped until the partition reaches data younger, or its log end.
    """
    cabin = {"e2e_ms": 60_000.0, "fps": 30.0}
    # The backlog is written before the roles start, so their first fetch sees its end.
    settings = load_settings(
        kafka={"bootstrap_servers": apache_kafka, "session_timeout_ms": 6000,
               "fetch_max_wait_ms": 10, "new_group_offset": "earliest"},
        slo={"classes": {"cabin": cabin}},
        app_id=f"skip-{secrets.token_hex(3)}", metrics={"enabled": False})
    prefix = f"skip-{secrets.token_hex(3)}-"
    await prepare_topics(settings, create=True)
    now_us = time.time_ns() // 1000
    parts = {"stale": (range(0, 30), now_us - 300_000_000),
             "skipped": (range(30, 60), now_us - 35_000_000),
             "fresh": (range(60, 90), now_us)}
    expected: dict[str, set[TokenKey]] = {name: set() for name in parts}
    producer = AIOKafkaProducer(**settings.kafka.aiokafka_options(), linger_ms=20)
    await producer.start()
    try:
        sends = []
        for n in range(2):
            stream = f"{prefix}{n}"
            for name, (seqs, t_us) in parts.items():
                for token, modality in _tokens(stream, seqs, t_us):
                    sends.append(await producer.send(catalog.MEDIA[modality], encode(token),
                                                     key=stream.encode()))
                    expected[name].add(TokenKey(stream, modality, token.seq))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    published = set().union(*expected.values())
    roles = await start_roles(settings, ["align"], Telemetry())
    try:
        ledger = Ledger()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ledger = Ledger()
            for topic in (catalog.LATE, catalog.ALIGNED):
                for value in await _values(apache_kafka, topic, prefix):
                    ledger.add(value)
            if not ledger.unaccounted(published):
                break
            await asyncio.sleep(1)
        assert not ledger.unaccounted(published)
        assert not ledger.settled_twice
        assert expected["stale"] | expected["skipped"] <= set(ledger.late)
        assert not expected["fresh"] & set(ledger.late)
        assert expected["fresh"] <= set(ledger.in_windows)
        reasons = {r["reason"] for r in await _late_records(apache_kafka, prefix)}
        assert any("skipped with a backlog" in str(r) for r in reasons), reasons
        assert roles.crash_reason is None
    finally:
        await roles.stop()
