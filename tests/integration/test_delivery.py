"""At-least-once delivery: offsets move only after what was produced is acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.agents.worker import WorkerAgent
from lockstep.config.settings import Settings, load_settings
from lockstep.engines.base import Engine, InferenceResult, ItemResult, WorkItem
from lockstep.engines.batching.dispatcher import Dispatcher
from lockstep.errors import EngineError, EngineTimeout
from lockstep.kafka.outbox import wall_us
from lockstep.observe.observer import Observer
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.schemas import Modality, ModalityState, Request, Timeline, Window
from tests.factories import T0

pytestmark = pytest.mark.integration


class BrokenEngine(Engine):
    """An engine whose every batch fails."""

    name = "broken"

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        raise EngineTimeout("the GPU stopped answering")


def _settings(bootstrap: str, pool: str) -> Settings:
    return load_settings(kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
                                "fetch_max_wait_ms": 10},
                         topics={"pools": ("vl", pool)},
                         worker={"pool": pool, "engine": "reference"},
                         app_id="lockstep-delivery",
                         metrics={"enabled": False})


def _request(pool: str, seq: int = 1, stream: str = "d") -> Request:
    window = Window(stream_id=stream, window_seq=seq, t_start_us=T0, t_end_us=T0 + 1,
                    anchor_t_us=T0, slo_class="cabin",
                    modalities={Modality.VIDEO: ModalityState(present=True)},
                    missing=[], members={}, timeline=Timeline(capture_us=T0, routed_us=T0))
    return Request(window=window, route="full", pool=pool, priority=0.5,
                   deadline_us=wall_us() + 60_000_000)


async def _serve_with(task: WorkerAgent, engine: Engine) -> Dispatcher[Any]:
    """Put ``engine`` (started) in place of the worker's own; return the worker's dispatcher."""
    assert task.dispatcher is not None, "the worker is started"
    task.engine = task.dispatcher.engine = engine
    await engine.start()
    return task.dispatcher


async def _until(observer: Observer, done: Callable[[], bool], timeout_s: float = 60) -> None:
    """Wait until ``done()`` holds, checking each time the observer reads something."""
    async def settled() -> None:
        while not done():
            observer.changed.clear()
            await observer.changed.wait()

    await asyncio.wait_for(settled(), timeout=timeout_s)


async def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        result: int | None = await consumer.committed(tp)
        return result
    finally:
        await consumer.stop()


async def test_an_engine_timeout_crashes_the_worker_without_committing(apache_kafka: str) -> None:
    pool = "broken"
    settings = _settings(apache_kafka, pool)
    await prepare_topics(settings, create=True)
    roles = await start_roles(settings, ["worker"], Telemetry())
    await _serve_with(roles.workers[0], BrokenEngine())
    assert await roles.wait_assigned()  # the new group's start is committed first
    producer = AIOKafkaProducer(bootstrap_servers=apache_kafka)
    await producer.start()
    try:
        meta = await (await producer.send(catalog.requests_topic(pool), encode(_request(pool)),
                                          key=b"d", partition=0))
        reason = await asyncio.wait_for(roles.wait_crashed(), timeout=60)
    finally:
        await producer.stop()
        await roles.stop()
    assert isinstance(reason, EngineTimeout)
    committed = await _committed(apache_kafka, roles.groups[0],
                                 TopicPartition(catalog.requests_topic(pool), 0))
    assert committed is None or committed <= meta.offset  # the request will be replayed


class PickyEngine(Engine):
    """An engine that cannot handle window 2 (in a batch or alone); the rest succeed."""

    name = "picky"

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        if any(i.request.window.window_seq == 2 for i in batch):
            raise EngineError("cannot read window 2")
        return [InferenceResult(f"ok {i.request.window.window_seq}", {}) for i in batch]


async def test_a_request_the_engine_cannot_handle_is_dead_lettered_not_a_poison_pill(
        apache_kafka: str) -> None:
    pool = "picky"
    settings = _settings(apache_kafka, pool)
    await prepare_topics(settings, create=True)
    observer = Observer(settings.kafka, keep=lambda sid: sid == "d")
    await observer.start()
    telemetry = Telemetry()
    roles = await start_roles(settings, ["worker"], telemetry)
    await _serve_with(roles.workers[0], PickyEngine())
    producer = AIOKafkaProducer(bootstrap_servers=apache_kafka, linger_ms=50)
    await producer.start()
    try:
        for seq in range(1, 5):
            await producer.send(catalog.requests_topic(pool), encode(_request(pool, seq)),
                                key=b"d", partition=0)
        await producer.flush()
        ledger = observer.ledger
        await _until(observer, lambda: len(ledger.responses) >= 3 and bool(ledger.dead_letters))
    finally:
        await producer.stop()
        await roles.stop()
        await observer.stop()
    assert roles.crash_reason is None
    assert sorted(seq for _, seq in observer.ledger.responses) == [1, 3, 4]
    [dead] = observer.ledger.dead_letters
    assert dead.stage == "worker" and "cannot read window 2" in dead.reason
    sample = telemetry.registry.get_sample_value
    assert sample("lockstep_dead_letters_total", {"stage": "worker", "error": "BadInput"}) == 1
    assert sample("lockstep_queue_capacity", {"pool": pool}) == settings.worker.max_queue


class SlowEngine(Engine):
    """Takes 30 ms a batch, whatever its size."""

    name = "slow"

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        await asyncio.sleep(0.03)
        return [InferenceResult(f"ok {i.request.window.window_seq}", {}) for i in batch]


async def test_a_full_admission_queue_holds_reading_back_and_loses_nothing(
        apache_kafka: str) -> None:
    pool = "bounded"
    settings = load_settings(
        kafka={"bootstrap_servers": apache_kafka, "session_timeout_ms": 6000,
               "fetch_max_wait_ms": 10},
        topics={"pools": ("vl", pool)}, app_id="lockstep-delivery", metrics={"enabled": False},
        worker={"pool": pool, "engine": "reference", "max_queue": 4, "max_batch": 2,
                "warmup": False})
    await prepare_topics(settings, create=True)
    observer = Observer(settings.kafka, keep=lambda sid: sid == "bp")
    await observer.start()
    roles = await start_roles(settings, ["worker"], Telemetry())
    dispatcher = await _serve_with(roles.workers[0], SlowEngine())
    policy = dispatcher.policy
    depths: list[int] = []
    admit = policy.admit

    def counting_admit(handle: Any, request: Request, now_us: int) -> None:
        admit(handle, request, now_us)
        depths.append(policy.depth)

    policy.admit = counting_admit  # type: ignore[method-assign]  # a spy on the real queue
    producer = AIOKafkaProducer(bootstrap_servers=apache_kafka, linger_ms=5)
    await producer.start()
    try:
        for seq in range(1, 41):
            await producer.send(catalog.requests_topic(pool),
                                encode(_request(pool, seq, stream="bp")), key=b"bp",
                                partition=seq % 4)
        await producer.flush()
        await _until(observer, lambda: len(observer.ledger.responses) >= 40)
    finally:
        await producer.stop()
        await roles.stop()
        await observer.stop()
    assert roles.crash_reason is None
    assert sorted(seq for _, seq in observer.ledger.responses) == list(range(1, 41))
    assert max(depths) == 4  # the queue filled up, and never grew past its bound
