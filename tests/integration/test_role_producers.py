"""The roles' producer on either client: same partitions, acknowledgement after the write.

On Apache Kafka. The co-partitioned topics, the takeover read-back and the subscribers'
partition choice all assume a stream's key lands where Kafka's default (murmur2)
partitioner puts it, whichever client wrote it.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from lockstep.config.settings import load_settings
from lockstep.errors import BrokerError, DeliveryFailed
from lockstep.kafka.clients import role_producer
from lockstep.kafka.outbox import Outbox
from lockstep.kafka.readback import partition_of
from lockstep.kafka.reader import TopicReader

pytestmark = pytest.mark.integration

KEYS = [f"cam-{i}".encode() for i in range(24)]


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


@pytest.mark.parametrize("client", ["aiokafka", "librdkafka"])
async def test_each_client_puts_a_key_where_murmur2_does_and_acks_once_written(
        apache_kafka: str, client: str) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": apache_kafka, "fetch_max_wait_ms": 50,
                                 "producer_client": client}).kafka
    topic = f"producers-{client}"
    await _create(apache_kafka, topic, 4)
    outbox = Outbox(role_producer(kafka), kafka.max_record_bytes)
    acked: list[bytes] = []
    await outbox.start()
    try:
        for key in KEYS:
            await outbox.send(topic, key, b"v-" + key, lambda k=key: acked.append(k))
        assert await outbox.flush(timeout_s=30.0)
    finally:
        await outbox.stop()
    assert sorted(acked) == sorted(KEYS)  # each once
    landed: dict[bytes, int] = {}
    async with TopicReader(kafka, [topic], what="test") as reader:
        await reader.seek_to_beginning()
        for _ in range(40):
            for tp, records in (await reader.fetch(timeout_ms=250)).items():
                landed.update({r.key: tp.partition for r in records})
            if len(landed) == len(KEYS):
                break
    assert landed == {key: partition_of(key, 4) for key in KEYS}


async def test_a_record_the_broker_refuses_for_good_fails_the_librdkafka_outbox(
        apache_kafka: str) -> None:
    kafka = load_settings(kafka={"bootstrap_servers": apache_kafka,
                                 "producer_client": "librdkafka"}).kafka
    producer = role_producer(kafka)
    await producer.start()
    try:
        delivery = await producer.send("bad topic name!", b"x", b"k")
        with pytest.raises(DeliveryFailed, match="Invalid topic") as refused:
            await asyncio.wait_for(delivery, 30.0)
        assert not refused.value.retriable
    finally:
        await producer.stop()
    outbox = Outbox(role_producer(kafka), kafka.max_record_bytes)
    await outbox.start()
    try:
        await outbox.send("bad topic name!", b"k", b"x", lambda: pytest.fail("acknowledged"))
        await outbox.flush(timeout_s=30.0)
        with pytest.raises(BrokerError, match="produce failed"):
            outbox.raise_if_failed()
    finally:
        await outbox.stop()
