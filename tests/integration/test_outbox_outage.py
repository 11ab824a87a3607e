"""A record waiting out a broker outage is known as produced, and written once when it ends.

On Apache Kafka, SIGKILLed and started again on its log dir.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from lockstep.config.settings import load_settings
from lockstep.kafka.apache import ApacheKafka
from lockstep.kafka.clients import role_producer
from lockstep.kafka.outbox import Outbox

pytestmark = pytest.mark.integration


async def _create(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()


async def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10)
    await consumer.start()
    values: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        for _ in range(20):  # 10 s; one more poll after the first record, for a duplicate
            batches = await consumer.getmany(timeout_ms=500)
            values += [r.value for records in batches.values() for r in records if r.value]
            if values and not batches:
                break
        return values
    finally:
        await consumer.stop()


async def _outage(broker: ApacheKafka, client: str) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": broker.bootstrap,
                                 "producer_client": client}).kafka
    acked: list[str] = []
    await _create(broker.bootstrap, "answers")
    outbox = Outbox(role_producer(kafka), kafka.max_record_bytes, max_backoff_s=0.5)
    await outbox.start()
    try:
        await outbox.send("answers", b"cam-1", b"first", lambda: acked.append("first"))
        assert await outbox.flush(timeout_s=10.0) and acked == ["first"]
        assert outbox.unacknowledged(["answers"]) == []
        await asyncio.to_thread(broker.take_down, hard=True)
        await outbox.send("answers", b"cam-1", b"second", lambda: acked.append("second"))
        await asyncio.sleep(3.0)  # past a delivery attempt or two
        assert outbox.unacknowledged(["answers"]) == [("answers", b"cam-1", b"second")]
        assert outbox.unacknowledged(["other"]) == []
        assert acked == ["first"]
        await asyncio.to_thread(broker.start)  # on its log dir
        assert await outbox.flush(timeout_s=90.0), "the record was never delivered"
        assert outbox.unacknowledged(["answers"]) == [] and acked == ["first", "second"]
        assert await _read_all(broker.bootstrap, "answers") == [b"first", b"second"]
    finally:
        await outbox.stop()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("client", ["aiokafka", "librdkafka"])
def test_a_record_sent_during_an_outage_is_listed_unacknowledged_until_written(
        tmp_path: Path, client: str) -> None:
    with ApacheKafka(base_dir=tmp_path) as broker:
        asyncio.run(_outage(broker, client))
