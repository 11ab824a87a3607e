"""Worker replicas share a pool, and a SIGKILLed one loses no request.

Two ``lockstep run --roles worker:POOL`` processes split the pool's partitions; when one is
killed the other answers every request it left behind.

Both run the cpu engine (the tiny offline Qwen2.5-VL) on Apache Kafka. A request is answered
at least once; the ledger keys responses by ``(stream_id, window_seq)`` and counts repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from lockstep.agents.app import group_id
from lockstep.agents.children import Child
from lockstep.agents.runner import prepare_topics
from lockstep.config.settings import load_settings
from lockstep.observe.observer import Observer
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from tests.factories import request, video
from tests.integration.procs import lockstep_run

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 6000
REQUESTS = 240
STREAMS = 12
START_S = 90.0
DRAIN_S = 90.0


def _wall_us() -> int:
    return time.time_ns() // 1000


def _members(bootstrap: str, group: str) -> list[set[int]]:
    """The partitions each member of ``group`` holds."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_consumer_groups([group]).values()
    description = future.result(timeout=10)
    return [{tp.partition for tp in m.assignment.topic_partitions}
            for m in description.members]


async def _until(check: Callable[[], bool], timeout_s: float,
                 *alive: Child) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        for process in alive:
            assert process.returncode is None, f"worker exited\n{process.tail()}"
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.25)
    return True


async def test_two_worker_replicas_share_a_pool_and_a_killed_one_loses_no_request(
        apache_kafka: str, tmp_path: Path) -> None:
    run_id = secrets.token_hex(3)
    pool = f"sc{run_id}"
    app_id = f"scale-{run_id}"
    settings = load_settings(
        kafka={"bootstrap_servers": apache_kafka, "session_timeout_ms": SESSION_TIMEOUT_MS,
               "fetch_max_wait_ms": 10},
        topics={"pools": ("vl", pool)}, worker={"pool": pool}, app_id=app_id,
        metrics={"enabled": False})
    await prepare_topics(settings, create=True)
    topic = catalog.requests_topic(pool)
    group = group_id(settings, "worker", pool)
    env = {"LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": apache_kafka, "LOCKSTEP_APP_ID": app_id,
           "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
           "LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": "10", "LOCKSTEP_METRICS__ENABLED": "false",
           "LOCKSTEP_WORKER__ENGINE": "cpu", "LOCKSTEP_WORKER__MAX_BATCH": "8",
           "LOCKSTEP_WORKER__CPU__THREADS": "1"}
    args = ["--log-level", "info", "run", "--roles", f"worker:{pool}"]
    streams = [f"sc-{run_id}-{i}" for i in range(STREAMS)]
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(f"sc-{run_id}-"))
    await observer.start()
    producer = AIOKafkaProducer(**settings.kafka.aiokafka_options(), linger_ms=5)
    await producer.start()
    answered = observer.ledger.responses

    async def send(seqs: range) -> None:
        for seq in seqs:
            stream = streams[seq % STREAMS]
            record = request(seq, stream=stream, video=video(stream=stream, width=32,
                                                             height=24),
                             deadline_us=_wall_us() + 600_000_000, routed_us=_wall_us())
            await producer.send(topic, encode(record.model_copy(update={"pool": pool})),
                                key=stream.encode())
        await producer.flush()

    try:
        with lockstep_run(args, {**env, "LOCKSTEP_DATA_DIR": str(tmp_path / "a")},
                          tmp_path / "a.log") as first, \
             lockstep_run(args, {**env, "LOCKSTEP_DATA_DIR": str(tmp_path / "b")},
                          tmp_path / "b.log") as second:
            # Both members hold disjoint partitions covering the topic.
            def shared() -> bool:
                with contextlib.suppress(KafkaException):  # the group may not exist yet
                    members = _members(apache_kafka, group)
                    return len(members) == 2 and all(members)
                return False

            assert await _until(shared, START_S, first, second), \
                f"the two workers never shared the pool\n{first.tail()}"
            members = _members(apache_kafka, group)
            assert not members[0] & members[1]
            assert members[0] | members[1] == set(range(settings.topics.pipeline_partitions))

            await send(range(REQUESTS // 2))
            assert await _until(lambda: len(answered) >= REQUESTS // 4, START_S, first,
                                second), f"no answers\n{first.tail()}"
            first.kill()
            await send(range(REQUESTS // 2, REQUESTS))
            settled = await _until(lambda: len(answered) >= REQUESTS, DRAIN_S, second)
            diagnostics = second.tail()
    finally:
        await producer.stop()
        await observer.stop()

    got = {seq for _, seq in answered}
    missing = sorted(set(range(REQUESTS)) - got)
    assert settled and not missing, f"{len(missing)} requests unanswered: {missing[:10]}\n" \
                                    f"{diagnostics}"
    assert {r.status for r in answered.values()} == {"ok"}
    assert {r.engine for r in answered.values()} == {"cpu"}

