"""A worker that joins a busy pool takes over queued requests; none is answered twice.

The first worker of a pool holds a queue of requests it has read but not answered (its
engine is slow). When a second worker joins, the group moves half the partitions to it,
and the newcomer reads every request of them not yet acknowledged. The first worker must
give those back unanswered, or both answer them: two responses for one window.

Both workers run in this process, each with its own consumer in the pool's group, on
Apache Kafka.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.agents.runner import RoleSet, prepare_topics, start_roles
from lockstep.config.settings import load_settings
from lockstep.observe.observer import Observer
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from tests.factories import request, video
from tests.integration.slowengine import until, use_slow_engine

pytestmark = pytest.mark.integration

REQUESTS = 120
STREAMS = 12
#: The engine's time per batch of two: the first worker answers about 20 requests a second.
BATCH_S = 0.1


def _wall_us() -> int:
    return time.time_ns() // 1000


def _answered(telemetry: Telemetry, pool: str) -> int:
    return int(telemetry.requests.labels(pool, "ok")._value.get())


async def test_a_worker_joining_a_busy_pool_takes_over_its_queue_and_nothing_is_answered_twice(
        apache_kafka: str, monkeypatch: pytest.MonkeyPatch) -> None:
    use_slow_engine(monkeypatch, BATCH_S)
    run_id = secrets.token_hex(3)
    pool = f"ho{run_id}"
    settings = load_settings(
        kafka={"bootstrap_servers": apache_kafka, "session_timeout_ms": 6000,
               "fetch_max_wait_ms": 10},
        topics={"pools": ("vl", pool)},
        # Arrival order, no shedding: every request waits for the engine in the queue.
        worker={"pool": pool, "engine": "reference", "policy": "fifo", "shed": False,
                "degrade": False, "warmup": False, "max_batch": 2},
        app_id=f"handover-{run_id}", metrics={"enabled": False})
    await prepare_topics(settings, create=True)
    streams = [f"ho-{run_id}-{i}" for i in range(STREAMS)]
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(f"ho-{run_id}-"))
    await observer.start()
    producer = AIOKafkaProducer(**settings.kafka.aiokafka_options(), linger_ms=5)
    await producer.start()
    first_telemetry, second_telemetry = Telemetry(), Telemetry()
    first: RoleSet | None = None
    second: RoleSet | None = None
    answered = observer.ledger.responses
    try:
        first = await start_roles(settings, ["worker"], first_telemetry, worker_pools=[pool])
        assert await first.wait_assigned()
        for seq in range(REQUESTS):
            stream = streams[seq % STREAMS]
            record = request(seq, stream=stream, video=video(stream=stream),
                             deadline_us=_wall_us() + 600_000_000, routed_us=_wall_us())
            await producer.send(catalog.requests_topic(pool),
                                encode(record.model_copy(update={"pool": pool})),
                                key=stream.encode())
        await producer.flush()
        assert await until(lambda: _answered(first_telemetry, pool) >= 10, 30.0)
        # The first worker has read the rest and holds it queued; now a second one joins.
        second = await start_roles(settings, ["worker"], second_telemetry, worker_pools=[pool])
        assert await second.wait_assigned()
        settled = await until(lambda: len(answered) >= REQUESTS, 60.0)
        await asyncio.sleep(2.0)  # time for a second answer to show
    finally:
        for roles in (second, first):
            if roles is not None:
                await roles.stop()
        await producer.stop()
        await observer.stop()

    by_first, by_second = _answered(first_telemetry, pool), _answered(second_telemetry, pool)
    figures = (f"{len(answered)} of {REQUESTS} answered; the first worker answered {by_first}, "
               f"the second {by_second}; {observer.ledger.duplicates['response']} repeated "
               f"and {observer.ledger.conflicts['response']} conflicting responses")
    assert settled, figures
    assert {seq for _, seq in answered} == set(range(REQUESTS)), figures
    assert by_second > 0, figures  # it took over part of the queue
    assert by_first + by_second == REQUESTS, figures  # the engines answered each request once
    assert observer.ledger.conflicts["response"] == 0, figures
    assert observer.ledger.duplicates["response"] == 0, figures
