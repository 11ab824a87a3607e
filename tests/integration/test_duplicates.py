"""A second copy of a window or request (a produce retried) is not answered twice."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.agents.app import ROLES
from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.config.settings import load_settings
from lockstep.observe.observer import Observer
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.schemas import Modality, Timeline
from tests.factories import request

pytestmark = pytest.mark.integration


async def test_a_window_and_a_request_sent_twice_are_answered_once(tansu: str) -> None:
    settings = load_settings(
        kafka={"bootstrap_servers": tansu, "fetch_max_wait_ms": 5, "new_group_offset": "latest"},
        worker={"engine": "reference"}, app_id=f"dup-{secrets.token_hex(3)}",
        metrics={"enabled": False},
        slo={"classes": {"cabin": {"e2e_ms": 10_000.0, "fps": 30.0}}})
    await prepare_topics(settings, create=True)
    prefix = f"dup-{secrets.token_hex(3)}-"
    now = time.time_ns() // 1000
    timeline = Timeline(capture_us=now, ingest_us=now, aligned_us=now, routed_us=now)
    # A window for route (nothing in it to infer on: route answers it itself) and a
    # request for the vl worker, each written twice, as a retried produce writes it.
    window = request(7, stream=f"{prefix}w", t_start_us=now - 30_000, t_end_us=now,
                     anchor_t_us=now, timeline=timeline, modalities={},
                     missing=[Modality.VIDEO]).window
    ask = request(8, stream=f"{prefix}r", t_start_us=now - 30_000, t_end_us=now,
                  anchor_t_us=now, timeline=timeline, deadline_us=now + 10_000_000)
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(prefix))
    await observer.start()
    telemetry = Telemetry()
    roles = await start_roles(settings, ROLES, telemetry, worker_pools=["vl", "text"])
    try:
        assert await roles.wait_assigned()
        producer = AIOKafkaProducer(**settings.kafka.aiokafka_options())
        await producer.start()
        try:
            for topic, record, stream_id in (
                    (catalog.ALIGNED, window, window.stream_id),
                    (catalog.requests_topic("vl"), ask, ask.window.stream_id)):
                for _ in range(2):
                    await producer.send_and_wait(topic, encode(record), key=stream_id.encode())
        finally:
            await producer.stop()
        deadline = time.monotonic() + 30
        keys = {(f"{prefix}w", 7), (f"{prefix}r", 8)}
        while (observer.ledger.responses.keys() < keys  # noqa: ASYNC110
               or _duplicates(telemetry) < 2) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # a second answer would come by now
        assert roles.crash_reason is None
    finally:
        await roles.stop()
        await observer.stop()

    ledger = observer.ledger
    assert set(ledger.responses.keys()) == keys
    assert not sum(ledger.conflicts.values()) and not ledger.duplicates["response"]
    registry = telemetry.registry
    assert registry.get_sample_value("lockstep_duplicates_total", {"stage": "route"}) == 1
    assert registry.get_sample_value("lockstep_duplicates_total", {"stage": "worker"}) == 1


def _duplicates(telemetry: Telemetry) -> float:
    registry = telemetry.registry
    return sum(registry.get_sample_value("lockstep_duplicates_total", {"stage": s}) or 0.0
               for s in ("route", "worker"))
