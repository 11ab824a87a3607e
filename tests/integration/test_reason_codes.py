"""On a real broker, every dead letter and late record of each stage carries its code."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.config.settings import Settings, load_settings
from lockstep.engines.base import Engine, InferenceResult, ItemResult, WorkItem
from lockstep.errors import EngineError
from lockstep.kafka.wait import topic_partitions
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode, encode
from lockstep.topics.schemas import (
    DeadLetter,
    LateToken,
    Modality,
    ModalityState,
    Timeline,
    VideoToken,
    Window,
)
from lockstep.topics.vectors import JPEG_16X8
from tests.factories import request

pytestmark = pytest.mark.integration
FAILING_WINDOW = 777


class PickyEngine(Engine):
    """Fails on one window; answers the rest."""

    name = "picky"

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        if any(i.request.window.window_seq == FAILING_WINDOW for i in batch):
            raise EngineError("cannot read this window")
        return [InferenceResult("ok", {}) for _ in batch]


def _settings(bootstrap: str) -> Settings:
    # A long class budget: only the token meant to be stale is read past it.
    return load_settings(kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
                                "fetch_max_wait_ms": 10, "new_group_offset": "latest"},
                         worker={"engine": "reference"}, app_id=f"codes-{secrets.token_hex(3)}",
                         metrics={"enabled": False},
                         slo={"classes": {"cabin": {"e2e_ms": 10_000.0, "fps": 30.0}}})


def _frame(stream: str, now_us: int, data: bytes = JPEG_16X8, **fields: object) -> VideoToken:
    return VideoToken.model_validate({"stream_id": stream, "seq": 1, "t_us": now_us,
                                      "format": "jpeg", "width": 16, "height": 8, "data": data,
                                      **fields})


def _records(prefix: str, now_us: int, max_bytes: int) -> list[tuple[str, str, bytes | None,
                                                                      bytes | None, str]]:
    """(expected code, topic, key, value, stage) of one record per path."""
    video, audio = catalog.MEDIA[Modality.VIDEO], catalog.MEDIA[Modality.AUDIO]
    s = {name: f"{prefix}{name}" for name in ("media", "key", "future", "topic", "tomb",
                                              "stale", "big", "window", "engine", "reply")}
    # A well-formed JPEG whose scan is padded to just under the record limit: the broker takes
    # the token, but no window holding it fits a record.
    padding = os.urandom(max_bytes - 1200).replace(b"\xff", b"\x00")
    big = _frame(s["big"], now_us, JPEG_16X8[:-2] + padding + b"\xff\xd9")
    contradictory = Window(
        stream_id=s["window"], window_seq=5, t_start_us=now_us, t_end_us=now_us + 33_000,
        anchor_t_us=now_us, slo_class="cabin",
        modalities={Modality.VIDEO: ModalityState(present=True)}, missing=[Modality.VIDEO],
        members={}, timeline=Timeline(capture_us=now_us, aligned_us=now_us))
    failing = request(FAILING_WINDOW, stream=s["engine"], deadline_us=now_us + 60_000_000,
                      routed_us=now_us)
    foreign = request(1, stream=s["reply"], deadline_us=now_us + 60_000_000).model_copy(
        update={"reply_topic": "media.video"})  # model_copy skips validation
    return [
        ("bad_media", video, s["media"].encode(),
         encode(_frame(s["media"], now_us, JPEG_16X8[:150])), "align"),
        ("key_mismatch", video, b"someone-else", encode(_frame(s["key"], now_us)), "align"),
        ("future_t_us", video, s["future"].encode(),
         encode(_frame(s["future"], now_us + 3_600_000_000)), "align"),
        ("wrong_topic", audio, s["topic"].encode(), encode(_frame(s["topic"], now_us)), "align"),
        ("tombstone", video, s["tomb"].encode(), None, "align"),
        ("window_too_large", video, s["big"].encode(), encode(big), "align"),
        ("contradictory", catalog.ALIGNED, s["window"].encode(), encode(contradictory), "route"),
        ("wrong_kind", catalog.ALIGNED, s["window"].encode(), encode(_frame(s["window"], now_us)),
         "route"),
        ("engine_failed", catalog.requests_topic("vl"), s["engine"].encode(), encode(failing),
         "worker"),
        ("schema", catalog.requests_topic("vl"), s["reply"].encode(), encode(foreign), "worker"),
        ("stale", video, s["stale"].encode(), encode(_frame(s["stale"], now_us - 60_000_000)),
         "late"),
    ]


async def _read_all(bootstrap: str, topic: str, prefix: str) -> list[object]:
    """The records of ``topic`` (to its current end) keyed by this test's streams."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False,
                                max_partition_fetch_bytes=16 * 1024 * 1024)
    await consumer.start()
    mine = (prefix.encode(), b"someone-else")
    found: list[object] = []
    try:
        tps = await topic_partitions(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            found += [decode(r.value, max_bytes=16 * 1024 * 1024)
                      for records in batches.values() for r in records
                      if r.key is not None and r.key.startswith(mine)]
    finally:
        await consumer.stop()
    return found


async def test_every_stage_dead_letters_and_late_records_carry_their_code(
        apache_kafka: str) -> None:
    settings = _settings(apache_kafka)
    prefix = f"rc-{secrets.token_hex(3)}-"
    await prepare_topics(settings, create=True)
    roles = await start_roles(settings, ["align", "route", "worker"], Telemetry(),
                              worker_pools=["vl"])
    try:
        assert await roles.wait_assigned()
        worker = roles.workers[0]
        assert worker.dispatcher is not None
        worker.engine = worker.dispatcher.engine = PickyEngine()
        await worker.engine.start()
        producer = AIOKafkaProducer(**settings.kafka.aiokafka_options(),
                                    max_request_size=settings.kafka.max_record_bytes)
        await producer.start()
        now_us = time.time_ns() // 1000
        records = _records(prefix, now_us, settings.kafka.max_record_bytes)
        try:
            sent = {}
            for code, topic, key, value, stage in records:
                meta = await (await producer.send(topic, value, key=key))
                sent[(meta.topic, meta.partition, meta.offset)] = (code, stage)
        finally:
            await producer.stop()
        deadline = time.monotonic() + 60
        dead: dict[tuple[str, int, int], DeadLetter] = {}
        late: list[LateToken] = []
        expected_dead = sum(1 for _, _, _, _, stage in records if stage != "late")
        while time.monotonic() < deadline and (len(dead) < expected_dead or not late):
            for record in await _read_all(apache_kafka, catalog.DEADLETTER, prefix):
                if isinstance(record, DeadLetter):
                    dead[(record.topic, record.partition, record.offset)] = record
            late = [r for r in await _read_all(apache_kafka, catalog.LATE, prefix)
                    if isinstance(r, LateToken)]
            await asyncio.sleep(0.5)
        assert roles.crash_reason is None
    finally:
        await roles.stop()
    for source, (code, stage) in sent.items():
        if stage == "late":
            continue
        assert source in dead, f"{code}: not dead-lettered"
        letter = dead[source]
        assert (letter.code, letter.stage) == (code, stage), letter.reason
    assert [(t.code, t.stream_id) for t in late] == [("stale", f"{prefix}stale")]
