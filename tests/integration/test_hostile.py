"""Records nobody on the team wrote: every one dead-lettered with a reason, no role down."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.agents.app import ROLES
from lockstep.agents.runner import RoleSet, prepare_topics, start_roles
from lockstep.chaos.hostile import Hostile, hostile_records
from lockstep.config.settings import Settings, load_settings
from lockstep.observe.observer import Observer, drain
from lockstep.producer.realtime import publish_synthetic
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from tests.factories import request, video

pytestmark = pytest.mark.integration
#: Hostile tokens about the live stream that its clock (not the schema) must refuse.
AIMED = ("spoofed_seq", "off_clock_seq")


def _settings(bootstrap: str) -> Settings:
    # New groups start at the log end: the session's earlier records are not this test's.
    return load_settings(kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
                                "fetch_max_wait_ms": 10, "new_group_offset": "latest"},
                         worker={"engine": "reference"}, app_id=f"hostile-{secrets.token_hex(3)}",
                         metrics={"enabled": False},
                         slo={"classes": {"cabin": {"e2e_ms": 10_000.0, "fps": 30.0}}})


@asynccontextmanager
async def _pipeline(settings: Settings, prefix: str) -> AsyncIterator[tuple[Observer, RoleSet]]:
    await prepare_topics(settings, create=True)
    observer = Observer(settings.kafka, keep=lambda sid: True)
    await observer.start()
    roles = await start_roles(settings, ROLES, Telemetry(), worker_pools=["vl", "text"])
    try:
        assert await roles.wait_assigned()
        yield observer, roles
    finally:
        await roles.stop()
        await observer.stop()


def _pipeline_hostiles(stream_id: str) -> list[Hostile]:
    """Broken records on the topics between the roles."""
    key = stream_id.encode()
    token = encode(video(stream=stream_id))
    foreign_reply = request(stream=stream_id).model_copy(update={"reply_topic": "media.video"})
    return [
        Hostile("random_bytes", catalog.ALIGNED, key, b"\x00garbage"),
        Hostile("wrong_kind", catalog.ALIGNED, key, token),
        Hostile("tombstone", catalog.requests_topic("vl"), key, None),
        Hostile("wrong_kind", catalog.requests_topic("vl"), key, token),
        # model_copy skips validation: the encoded request carries the forbidden topic
        Hostile("reply_topic", catalog.requests_topic("vl"), key, encode(foreign_reply)),
    ]


async def test_hostile_records_are_dead_lettered_and_the_stream_they_aim_at_carries_on(
        apache_kafka: str) -> None:
    settings = _settings(apache_kafka)
    prefix = f"h-{secrets.token_hex(3)}-"
    live = f"{prefix}live"
    async with _pipeline(settings, prefix) as (observer, roles):
        publishing = asyncio.create_task(
            publish_synthetic(settings.kafka, [live], 8.0, Telemetry()))
        await asyncio.sleep(3.0)  # the live stream's clocks are fitted by now
        hostiles = [h for h in hostile_records(
            live, time.time_ns() // 1000, seed=7, per_kind=3,
            max_record_bytes=settings.kafka.max_record_bytes, live_seq=90)
            if h.kind not in AIMED] + _pipeline_hostiles(live)
        producer = AIOKafkaProducer(**settings.kafka.aiokafka_options(),
                                    max_request_size=settings.kafka.max_record_bytes)
        await producer.start()
        # The tokens aimed at the live stream go first, made just before they are sent: a
        # token read later than its class budget after capture is shed as stale instead.
        spoofed_at_us = time.time_ns() // 1000
        hostiles[:0] = [h for h in hostile_records(live, spoofed_at_us, seed=8, per_kind=3,
                                                   max_record_bytes=65_536, live_seq=90)
                        if h.kind in AIMED]
        try:
            sent = [(h, await (await producer.send(h.topic, h.value, key=h.key)))
                    for h in hostiles]
        finally:
            await producer.stop()
        published = await publishing
        sources = {(m.topic, m.partition, m.offset): h.kind for h, m in sent}

        def all_dead() -> bool:
            return sources.keys() <= {(d.topic, d.partition, d.offset)
                                      for d in observer.ledger.dead_letters}

        assert await drain(observer, published, timeout_s=60.0), "ledger did not close"
        deadline = time.monotonic() + 30
        while not all_dead() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)  # the observer reads on; nothing to wait on but time
        assert roles.crash_reason is None

    ledger = observer.ledger
    dead = {(d.topic, d.partition, d.offset): d for d in ledger.dead_letters}
    missing = {kind for src, kind in sources.items() if src not in dead}
    assert not missing, f"not dead-lettered: {sorted(missing)}"
    for src, kind in sources.items():
        letter = dead[src]
        assert letter.reason, kind
        if letter.value is not None:  # a dead letter always fits its topic
            assert len(letter.value) <= 1024 * 1024 and letter.value_size >= len(letter.value)
    assert any(d.truncated for d in ledger.dead_letters)
    # The live stream was never silenced: its tokens all settled, most in windows, and
    # frames captured after the spoofed ones still anchor windows.
    assert not ledger.unaccounted(published.keys)
    live_windows = [w for (sid, _), w in ledger.windows.items() if sid == live]
    assert any(w.t_start_us > spoofed_at_us + 1_000_000 for w in live_windows)
    # Frames captured a second after the spoofed ones (30 fps, spoofed at ~3 s) still anchor
    # windows (a silenced stream anchors none; on a loaded machine some frames are late).
    anchored = [seq for sid, seq in ledger.windows if sid == live and 120 <= seq < 1 << 62]
    assert len(anchored) >= 10, sorted(anchored)
    assert not ledger.conflicts and not ledger.settled_twice
    assert ledger.unanswered() == set()
